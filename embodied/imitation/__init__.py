"""Imitation: supervised finetuning of VLAs (`embodied sft`) and behaviour cloning of MLP policies."""
