"""An instruction tokenizer that needs no download: a WordLevel `tokenizers` model
trained locally from instruction strings, saved as tokenizer.json with a checkpoint.

Ids 0..3 are the special tokens [PAD], [UNK], [BOS], [EOS]; words follow in a
deterministic order (by frequency, then alphabetically), so training twice on the
same corpus gives the same vocabulary.

    tok = InstructionTokenizer.train(["push the red cube onto the green square"])
    ids, mask = tok.batch(["push the red cube"], max_length=16)  # int64 [B, L], bool [B, L]
    tok.save("ckpt/"); InstructionTokenizer.load("ckpt/")
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

PAD, UNK, BOS, EOS = "[PAD]", "[UNK]", "[BOS]", "[EOS]"
SPECIALS = (PAD, UNK, BOS, EOS)
FILE_NAME = "tokenizer.json"

# Words of every MuJoCo task instruction ("move the gripper to the target", "push the
# red cube onto the green square", ...) and the palette's colour names. A policy's
# tokenizer is trained on this plus its config's extra instructions.
DEFAULT_CORPUS: tuple[str, ...] = (
    "move the gripper to the target",
    "push the cube onto the square",
    "pick up the cube and lift it",
    "place the cube on the square",
    "red green blue yellow purple orange",
    "left right up down front back near far first second other",
)


class InstructionTokenizer:
    """Lower-cased, punctuation-split words -> ids; unknown words -> [UNK]."""

    def __init__(self, tokenizer: Tokenizer):
        self.tok = tokenizer
        self.pad_id = tokenizer.token_to_id(PAD)
        self.bos_id = tokenizer.token_to_id(BOS)
        self.eos_id = tokenizer.token_to_id(EOS)
        self.unk_id = tokenizer.token_to_id(UNK)

    @classmethod
    def train(cls, texts: Iterable[str]) -> "InstructionTokenizer":
        """A WordLevel vocabulary of every word in `texts` (plus the specials)."""
        base = _empty_tokenizer({t: i for i, t in enumerate(SPECIALS)})
        counts: dict[str, int] = {}
        for text in texts:
            for word, _ in base.pre_tokenizer.pre_tokenize_str(base.normalizer.normalize_str(text)):
                counts[word] = counts.get(word, 0) + 1
        words = sorted(counts, key=lambda w: (-counts[w], w))
        vocab = {t: i for i, t in enumerate(SPECIALS)}
        for w in words:
            vocab.setdefault(w, len(vocab))
        return cls(_empty_tokenizer(vocab))

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """[BOS] word ids [EOS]."""
        return [self.bos_id, *self.tok.encode(text).ids, self.eos_id]

    def batch(self, texts: Sequence[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded (and truncated) ids int64 [B, max_length], mask bool [B, max_length]."""
        ids = torch.full((len(texts), max_length), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(texts), max_length), dtype=torch.bool)
        for i, text in enumerate(texts):
            row = self.encode(text)[:max_length]
            ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, :len(row)] = True
        return ids, mask

    def save(self, directory: str | Path) -> None:
        self.tok.save(str(Path(directory) / FILE_NAME))

    @classmethod
    def load(cls, directory: str | Path) -> "InstructionTokenizer":
        return cls(Tokenizer.from_file(str(Path(directory) / FILE_NAME)))


def _empty_tokenizer(vocab: dict[str, int]) -> Tokenizer:
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    return tok
