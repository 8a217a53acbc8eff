"""SmolVLA: LeRobot's own modelling code against our loader (`make parity`), float32, tiny size.

Two steps over one work folder, run by two interpreters (the Makefile runs them in order):
  lerobot   (.venv-parity: LeRobot 0.4.4, transformers 4.57.1, torch 2.13)  builds a tiny SmolVLM2
            directory (config, word-level tokenizer with SmolVLM's special tokens, processor),
            LeRobot's SmolVLAPolicy on it with random weights (norm weights perturbed so that they
            matter), saves it with LeRobot's save_pretrained and its pre/post-processors, and
            records on fixed inputs: the prefix keys / values, the velocity at a fixed (x_t, t)
            and the actions sampled from fixed noise (LeRobot's sample_actions)
  ours      (.venv)  load_pretrained on that directory, the same quantities, max abs differences;
            exit 1 above 1e-4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

IMAGE, STATE, ACTION, CHUNK, STEPS, B = 32, 5, 4, 6, 4, 3
TASKS = ["push the red cube onto the green square", "reach the target", "lift the blue cube"]
WORDS = "push pick place the a red green blue cube square onto into reach lift move gripper to target".split()
SPECIAL = {"fake_image_token": "<fake_token_around_image>", "image_token": "<image>",
           "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>"}


def inputs() -> dict[str, np.ndarray]:
    g = np.random.default_rng(3)
    return {"images": g.integers(0, 256, (B, IMAGE, IMAGE, 3), dtype=np.uint8),
            "state": g.standard_normal((B, 9)).astype(np.float32),
            "x_t": g.standard_normal((B, CHUNK, 32)).astype(np.float32), "t": np.array([0.9, 0.5, 0.13], np.float32),
            "noise": g.standard_normal((B, CHUNK, 32)).astype(np.float32)}


def lerobot_side(work: Path) -> None:
    import torch

    lib = torch.library.Library("torchvision", "DEF")  # PyPI's torchvision is a CUDA build: declare its
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")  # ops' schemas so it imports
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, SmolVLMConfig

    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy, make_att_2d_masks
    from lerobot.policies.smolvla.processor_smolvla import make_smolvla_pre_post_processors

    torch.manual_seed(0)
    torch.set_num_threads(1)
    vlm = work / "smolvlm2"
    words = ["<pad>", "<unk>", "<bos>", *SPECIAL.values(), *WORDS]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<bos>",
                                        extra_special_tokens=SPECIAL)
    tokenizer.save_pretrained(str(vlm))
    text = dict(model_type="llama", vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5, rope_theta=10000.0)
    SmolVLMConfig(vision_config=dict(model_type="smolvlm_vision", hidden_size=128, intermediate_size=64,
                                     num_hidden_layers=2, num_attention_heads=2, image_size=IMAGE, patch_size=8),
                  text_config=text, scale_factor=2, image_token_id=words.index("<image>")).save_pretrained(str(vlm))
    processor = transformers.SmolVLMProcessor(image_processor=transformers.SmolVLMImageProcessor(), tokenizer=tokenizer,
                                              video_processor=transformers.SmolVLMVideoProcessor(), image_seq_len=4)
    processor.save_pretrained(str(vlm))

    feats = {"observation.images.top": PolicyFeature(type=FeatureType.VISUAL, shape=(3, IMAGE, IMAGE)),
             "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(STATE,))}
    cfg = SmolVLAConfig(vlm_model_name=str(vlm), load_vlm_weights=False, num_vlm_layers=4, chunk_size=CHUNK,
                        n_action_steps=CHUNK, num_steps=STEPS, resize_imgs_with_padding=(IMAGE, IMAGE), device="cpu",
                        input_features=feats, output_features={"action": PolicyFeature(type=FeatureType.ACTION,
                                                                                       shape=(ACTION,))})
    policy = SmolVLAPolicy(cfg).eval()
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.2)
    g = torch.Generator().manual_seed(1)
    stats = {"observation.state": {"mean": torch.randn(STATE, generator=g) * 0.1, "std": torch.rand(STATE, generator=g) + 0.2},
             "action": {"mean": torch.randn(ACTION, generator=g) * 0.1, "std": torch.rand(ACTION, generator=g) + 0.2}}
    pre, post = make_smolvla_pre_post_processors(cfg, dataset_stats=stats)
    ckpt = work / "smolvla"
    policy.save_pretrained(str(ckpt))
    pre.save_pretrained(str(ckpt))
    post.save_pretrained(str(ckpt))

    x = inputs()
    batch = pre({"observation.images.top": torch.from_numpy(x["images"]).permute(0, 3, 1, 2).float() / 255.0,
                 "observation.state": torch.from_numpy(x["state"][:, :STATE]), "task": TASKS})
    images, img_masks = policy.prepare_images(batch)
    state = policy.prepare_state(batch)
    tokens, masks = batch["observation.language.tokens"], batch["observation.language.attention_mask"]
    model = policy.model
    with torch.no_grad():
        embs, pad, att = model.embed_prefix(images, img_masks, tokens, masks, state=state)
        _, cache = model.vlm_with_expert.forward(attention_mask=make_att_2d_masks(pad, att),
                                                 position_ids=torch.cumsum(pad, dim=1) - 1, past_key_values=None,
                                                 inputs_embeds=[embs, None], use_cache=True, fill_kv_cache=True)
        v = model.denoise_step(pad, cache, torch.from_numpy(x["x_t"]), torch.from_numpy(x["t"]))
        actions = model.sample_actions(images, img_masks, tokens, masks, state, noise=torch.from_numpy(x["noise"]))
    keys = np.stack([cache[i]["key_states"].numpy() for i in range(len(cache))])
    values = np.stack([cache[i]["value_states"].numpy() for i in range(len(cache))])
    np.savez(work / "lerobot.npz", velocity=v.numpy(), actions=actions.numpy(), keys=keys, values=values,
             pad=pad.numpy(), tokens=tokens.numpy(), **x)
    print(f"lerobot: LeRobot {__import__('lerobot').__version__ if hasattr(__import__('lerobot'), '__version__') else '0.4.4'}, "
          f"transformers {transformers.__version__}, torch {torch.__version__}: wrote {ckpt} and lerobot.npz")


def ours(work: Path) -> None:
    import torch

    from policies.vla.pretrained import load_pretrained

    torch.set_num_threads(1)
    ref = np.load(work / "lerobot.npz")
    imap = {"cameras": {"observation.images.top": "front"}, "image_size": IMAGE, "state_indices": list(range(STATE)),
            "action_dim": ACTION, "chunk_size": CHUNK, "num_steps": STEPS}
    policy = load_pretrained(work / "smolvla", imap, work / "smolvlm2")
    obs = {"state": torch.from_numpy(ref["state"]), "rgb_front": torch.from_numpy(ref["images"]), "instruction": TASKS}
    with torch.no_grad():
        prefix, state = policy.encode(obs)
        # real tokens in order (LeRobot pads the text to the longest prompt, we to max_text_len)
        ours_k = np.stack([k.transpose(1, 2).numpy() for k, _ in prefix.kv])  # [L, B, T', Hkv, Dh]
        ours_v = np.stack([v.transpose(1, 2).numpy() for _, v in prefix.kv])
        diffs = {"prefix keys / values": max(
            max(np.abs(ours_k[:, b, prefix.mask[b].numpy()] - ref["keys"][:, b, ref["pad"][b].astype(bool)]).max(),
                np.abs(ours_v[:, b, prefix.mask[b].numpy()] - ref["values"][:, b, ref["pad"][b].astype(bool)]).max())
            for b in range(B))}
        u = policy.velocity(prefix, state, torch.from_numpy(ref["x_t"]), torch.from_numpy(ref["t"])).numpy()
        diffs["velocity at fixed (x_t, t)"] = np.abs(u - ref["velocity"]).max()
        chain, _ = policy.sample(prefix, state, torch.from_numpy(ref["noise"]), STEPS)
        diffs[f"actions from fixed noise ({STEPS} steps)"] = np.abs(chain[:, -1].numpy() - ref["actions"]).max()
    print(f"ours: {policy.load_report.summary()}")
    for name, d in diffs.items():
        print(f"| SmolVLA | {name} | {d:.1e} |")
    bad = [n for n, d in diffs.items() if not d <= 1e-4]
    if bad:
        print(f"parity: {bad[0]} differs by more than 1e-4")
        sys.exit(1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=["lerobot", "ours"])
    ap.add_argument("work", type=Path)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    lerobot_side(args.work) if args.step == "lerobot" else ours(args.work)
