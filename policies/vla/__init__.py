"""Vision-Language-Action policies on `transformers` building blocks (see docs/vla.md)."""
