"""Convert a released checkpoint into the toolkit's format, strictly:

    python -m policies.vla.pretrained SRC --input-map configs/input_maps/X.yaml --tokenizer TOK --out DIR
    (OpenVLA-OFT: --tokenizer defaults to SRC; --base BASE for a checkpoint that holds only its LoRA adapter)

DIR is an ordinary save_pretrained directory (config.json, model.safetensors, tokenizer), the
`policy.init_from` of `embodied train` / `embodied sft`. Prints the load report; any mismatch
is a one-line error and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from policies.vla.pretrained import DTYPES, FORMATS, PretrainedError, load_pretrained


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m policies.vla.pretrained", description=__doc__.splitlines()[0])
    ap.add_argument("src", help="the released checkpoint directory")
    ap.add_argument("--input-map", required=True, help="configs/input_maps/*.yaml for this checkpoint and task")
    ap.add_argument("--tokenizer", help="local Hugging Face tokenizer directory (PaliGemma's for pi0; "
                    "OpenVLA-OFT: default SRC)")
    ap.add_argument("--base", help="OpenVLA-OFT only: the model an adapter-only checkpoint fine-tuned")
    ap.add_argument("--out", required=True, help="directory to write in the toolkit's format")
    ap.add_argument("--format", default="auto", choices=["auto", *FORMATS])
    ap.add_argument("--dtype", default="float32", choices=list(DTYPES))
    args = ap.parse_args(argv)
    try:
        policy = load_pretrained(args.src, args.input_map, args.tokenizer, format=args.format, dtype=args.dtype,
                                 base=args.base)
    except PretrainedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(policy.load_report.summary())
    policy.save_pretrained(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
