"""Camera frames to the policy's input: decode, colour-convert, crop, resize (OpenCV).

A robot's camera gives what its driver gives: 640 x 480 JPEG, 1280 x 720 bgr8, a mono
sensor at an odd size. A policy wants uint8 RGB [H, W, 3] at the size it was trained on.
`CameraTransform` is that mapping, one small object that RobotEnv (hence `embodied serve`,
`finetune-robot`, `sim2real --robot`) applies to every frame and that the recorder writes
into the dataset's metadata, so that SFT, RL and serving see the same pixels.

Per frame, in this order:
  decode     sensor_msgs/Image rgb8, bgr8, rgba8, bgra8, mono8 (row `step` padding allowed),
             or sensor_msgs/CompressedImage jpeg / png (`cv2.imdecode`; ROS `format` strings
             such as "jpeg", "png", "bgr8; jpeg compressed bgr8") -> uint8 RGB [h, w, 3]
             (mono is replicated to three channels, alpha dropped)
  roi        optional fixed region (x, y, width, height) in source pixels, cut first
             (a workspace crop a deployment knows from its camera mount)
  crop       "center": the largest centred window with the target's aspect ratio
             (W / H), so nothing is stretched (the choice of most VLA deployments and of
             torchvision's Resize + CenterCrop); "none": the whole frame, stretched
  resize     to size (H, W): cv2.INTER_AREA when the crop shrinks on both axes (OpenCV's
             advice for decimation: no aliasing), else cv2.INTER_LINEAR (interpolation
             "auto"); or the named interpolation ("area", "linear", "cubic", "nearest")
A frame that already has the target size and aspect passes unchanged (no resampling).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from robot_bridge import ros_types as rt

CROPS = ("center", "none")
INTERPOLATIONS = ("auto", "area", "linear", "cubic", "nearest")
RAW_ENCODINGS = ("rgb8", "bgr8", "rgba8", "bgra8", "mono8")
COMPRESSED_FORMATS = ("jpeg", "png")


class CameraError(ValueError):
    """A frame or a transform config that cannot be used (one line naming the field)."""


def _cv2() -> Any:
    import cv2

    return cv2


@dataclass(frozen=True)
class CameraTransform:
    """size: the policy's (H, W); roi: None or (x, y, width, height) in source pixels."""

    size: tuple[int, int] = (64, 64)
    crop: str = "center"
    interpolation: str = "auto"
    roi: tuple[int, int, int, int] | None = None

    def __post_init__(self) -> None:
        size = tuple(int(v) for v in self.size)
        if len(size) != 2 or min(size) < 1:
            raise CameraError(f"image_size: expected [H, W] with H, W >= 1, got {list(self.size)}")
        object.__setattr__(self, "size", size)
        if self.crop not in CROPS:
            raise CameraError(f"camera.crop: unknown {self.crop!r}; allowed: {', '.join(CROPS)}")
        if self.interpolation not in INTERPOLATIONS:
            raise CameraError(f"camera.interpolation: unknown {self.interpolation!r}; allowed: "
                              f"{', '.join(INTERPOLATIONS)}")
        if self.roi is not None:
            roi = tuple(int(v) for v in self.roi)
            if len(roi) != 4 or roi[0] < 0 or roi[1] < 0 or roi[2] < 1 or roi[3] < 1:
                raise CameraError(f"camera.roi: expected [x, y, width, height] with x, y >= 0 and "
                                  f"width, height >= 1, got {list(self.roi)}")
            object.__setattr__(self, "roi", roi)

    @classmethod
    def from_config(cls, image_size: Any, camera: Any = None) -> "CameraTransform":
        """From RobotEnvConfig's image_size and its `camera` mapping (crop, interpolation, roi)."""
        if isinstance(camera, CameraTransform):
            return cls(tuple(image_size), camera.crop, camera.interpolation, camera.roi)
        camera = dict(camera or {})
        allowed = ("crop", "interpolation", "roi")
        for key in camera:
            if key not in allowed:
                raise CameraError(f"camera.{key}: unknown key; allowed: {', '.join(allowed)}")
        return cls(tuple(image_size), **camera)

    def to_dict(self) -> dict[str, Any]:
        """What the dataset's metadata records (JSON)."""
        d = asdict(self)
        d["size"] = list(self.size)
        d["roi"] = None if self.roi is None else list(self.roi)
        d["library"] = "opencv"
        return d

    # ------------------------------------------------------------------ the geometry
    def window(self, h: int, w: int) -> tuple[int, int, int, int]:
        """The source window (x, y, width, height) that is resized, for a frame h x w."""
        x0, y0, cw, ch = 0, 0, w, h
        if self.roi is not None:
            x0, y0, cw, ch = self.roi
            if x0 + cw > w or y0 + ch > h:
                raise CameraError(f"camera.roi: {list(self.roi)} does not fit a {w} x {h} (width x height) frame")
        if self.crop == "center":
            H, W = self.size
            if cw * H > ch * W:  # too wide: keep the full height
                nw = max(1, round(ch * W / H))
                x0, cw = x0 + (cw - nw) // 2, nw
            elif cw * H < ch * W:  # too tall: keep the full width
                nh = max(1, round(cw * H / W))
                y0, ch = y0 + (ch - nh) // 2, nh
        return x0, y0, cw, ch

    def flag(self, ch: int, cw: int) -> int:
        """The cv2 interpolation flag for resizing a ch x cw window to size."""
        cv2 = _cv2()
        name = self.interpolation
        if name == "auto":
            H, W = self.size
            name = "area" if (H <= ch and W <= cw) else "linear"
        return {"area": cv2.INTER_AREA, "linear": cv2.INTER_LINEAR, "cubic": cv2.INTER_CUBIC,
                "nearest": cv2.INTER_NEAREST}[name]

    def apply(self, rgb: np.ndarray) -> np.ndarray:
        """uint8 [h, w, 3] -> uint8 [H, W, 3] (size)."""
        h, w = rgb.shape[:2]
        x0, y0, cw, ch = self.window(h, w)
        win = rgb[y0:y0 + ch, x0:x0 + cw]
        H, W = self.size
        if (ch, cw) == (H, W):
            return np.array(win)  # the right size already: the pixels as they are (a copy)
        return _cv2().resize(np.ascontiguousarray(win), (W, H), interpolation=self.flag(ch, cw))

    def __call__(self, msg: Any) -> np.ndarray:
        """A sensor_msgs Image or CompressedImage -> uint8 RGB [H, W, 3]."""
        return self.apply(decode(msg))


def compressed_kind(fmt: str) -> str | None:
    """'jpeg' or 'png' from a CompressedImage format ("jpeg", "bgr8; jpeg compressed bgr8"), or None."""
    f = fmt.lower()
    for kind, words in (("jpeg", ("jpeg", "jpg")), ("png", ("png",))):
        if any(word in f for word in words):
            return kind
    return None


def check(msg: Any) -> str | None:
    """Why a frame cannot be decoded (cheap checks, no decoding), or None."""
    if hasattr(msg, "format"):
        if compressed_kind(msg.format) is None:
            return f"format {msg.format!r}; allowed: {', '.join(COMPRESSED_FORMATS)}"
        return None if len(msg.data) else "empty CompressedImage"
    if msg.encoding not in RAW_ENCODINGS:
        return f"encoding {msg.encoding!r}; allowed: {', '.join(RAW_ENCODINGS)}"
    c = _channels(msg.encoding)
    if msg.height < 1 or msg.width < 1 or msg.step < c * msg.width or len(msg.data) < msg.step * msg.height:
        return (f"{len(msg.data)} bytes, step {msg.step}, do not hold {msg.height} x {msg.width} "
                f"{msg.encoding}")
    return None


def _channels(encoding: str) -> int:
    return {"mono8": 1, "rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4}[encoding]


def decode(msg: Any) -> np.ndarray:
    """sensor_msgs/msg/Image (RAW_ENCODINGS) or CompressedImage (jpeg, png) -> uint8 RGB [h, w, 3]."""
    why = check(msg)
    if why is not None:
        raise CameraError(f"image: {why}")
    cv2 = _cv2()
    if hasattr(msg, "format"):
        bgr = cv2.imdecode(np.frombuffer(bytes(msg.data), np.uint8), cv2.IMREAD_COLOR)
        if bgr is None:
            raise CameraError(f"image: {len(msg.data)} bytes are not a valid {compressed_kind(msg.format)} image")
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    c = _channels(msg.encoding)
    rows = np.asarray(msg.data, np.uint8)[:msg.step * msg.height].reshape(msg.height, msg.step)
    arr = np.array(rows[:, :msg.width * c].reshape(msg.height, msg.width, c))  # a writable copy
    code = {"mono8": cv2.COLOR_GRAY2RGB, "bgr8": cv2.COLOR_BGR2RGB, "rgba8": cv2.COLOR_RGBA2RGB,
            "bgra8": cv2.COLOR_BGRA2RGB}.get(msg.encoding)
    return arr if code is None else cv2.cvtColor(arr, code)


def compressed(rgb: np.ndarray, kind: str = "jpeg", quality: int = 90, frame_id: str = "camera",
               t: float | None = None) -> Any:
    """uint8 RGB [H, W, 3] -> sensor_msgs/msg/CompressedImage ("jpeg" or "png"), as
    image_transport's compressed plugin publishes it."""
    if kind not in COMPRESSED_FORMATS:
        raise CameraError(f"compressed: unknown {kind!r}; allowed: {', '.join(COMPRESSED_FORMATS)}")
    cv2 = _cv2()
    bgr = cv2.cvtColor(np.ascontiguousarray(rgb, np.uint8), cv2.COLOR_RGB2BGR)
    params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)] if kind == "jpeg" else []
    ok, buf = cv2.imencode("." + ("jpg" if kind == "jpeg" else "png"), bgr, params)
    if not ok:
        raise CameraError(f"compressed: OpenCV could not encode a {rgb.shape} frame as {kind}")
    return rt.msg_class("sensor_msgs/msg/CompressedImage")(header=rt.header(frame_id, t), format=kind,
                                                           data=buf.reshape(-1))


def raw(pixels: np.ndarray, encoding: str, frame_id: str = "camera", t: float | None = None,
        pad: int = 0) -> Any:
    """uint8 [H, W] (mono8) or [H, W, C] pixels already in `encoding`'s channel order ->
    sensor_msgs/msg/Image, each row padded with `pad` bytes (step = W * C + pad)."""
    if encoding not in RAW_ENCODINGS:
        raise CameraError(f"raw: unknown encoding {encoding!r}; allowed: {', '.join(RAW_ENCODINGS)}")
    c = _channels(encoding)
    px = np.ascontiguousarray(pixels, np.uint8).reshape(pixels.shape[0], pixels.shape[1], c)
    h, w = px.shape[:2]
    rows = np.zeros((h, w * c + pad), np.uint8)
    rows[:, :w * c] = px.reshape(h, w * c)
    return rt.msg_class("sensor_msgs/msg/Image")(header=rt.header(frame_id, t), height=h, width=w, encoding=encoding,
                                                 is_bigendian=0, step=w * c + pad, data=rows.reshape(-1))
