"""Token ids of rendered chat prompts, one segment at a time, the segments kept.

A chat template's output is text cut by added tokens (``<|im_start|>``, ``<|im_end|>``...), and a
Hugging Face fast tokenizer splits its input at added tokens before anything else: the text
between two of them is normalized, pre-tokenized and encoded on its own. So the ids of a whole
prompt are the ids of its segments put end to end, and a conversation's next prompt repeats
every segment of the one before but the last few. :class:`SegmentTokenizer` keeps each
segment's ids (bounded, least recently used out first) and encodes only the segments it has not
seen: a session's 20th turn encodes its two new messages, not 4,000 tokens of history (the
prefix cache spares the engine's prefill; this spares the tokenizer).

Whether a tokenizer really splits that way is checked, not assumed: :meth:`for_tokenizer`
returns ``None`` (encode whole prompts, as before) unless the tokenizer is a fast one whose
added tokens strip nothing around them, and a probe text encodes the same both ways.
"""

from __future__ import annotations

import re
from array import array
from typing import Any

# Added tokens woven with text that tests the segment boundaries: spaces and newlines on
# either side, a combining accent (normalizers), digits and punctuation (pre-tokenizers).
_PROBE_TEXTS = (
    "user\nWhat's  2+2?\n\n",
    " \n",
    "assistant\n  It is 4.  12345 caf\u00e9 cafe\u0301 \u2014 ok!\n",
    "\n",
    'tool\n{"x": [1, 2]}\t \n',
)
MAX_TOKENS = 4_000_000  # ids kept, all segments together (4 bytes each: 16 MB)


class SegmentTokenizer:
    """``encode(text)`` == the tokenizer's ids of ``text`` (no special tokens added)."""

    def __init__(self, tokenizer: Any, max_tokens: int = MAX_TOKENS) -> None:
        backend = tokenizer.backend_tokenizer
        added = {
            token.content: token_id for token_id, token in tokenizer.added_tokens_decoder.items()
        }
        self._encode_one = backend.encode
        self._added = added
        contents = sorted(added, key=len, reverse=True)  # the longest match first
        self._split = re.compile("(" + "|".join(map(re.escape, contents)) + ")").split
        self._cache: dict[str, array[int]] = {}
        self._size = 0
        self.max_tokens = max_tokens

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> SegmentTokenizer | None:
        """A segment tokenizer for ``tokenizer``, or None where segments would not add up."""
        if not getattr(tokenizer, "is_fast", False) or not hasattr(tokenizer, "backend_tokenizer"):
            return None
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        if not added or any(t.lstrip or t.rstrip or t.single_word for t in added.values()):
            return None
        segments = cls(tokenizer)
        specials = [t.content for t in added.values()]
        probe = "".join(
            text + specials[i % len(specials)] for i, text in enumerate(_PROBE_TEXTS * 2)
        )
        probe = specials[0] + probe + _PROBE_TEXTS[0]
        whole = list(tokenizer(probe, add_special_tokens=False)["input_ids"])
        if segments.encode(probe) != whole:
            return None
        segments.clear()
        return segments

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``: kept segments looked up, new ones encoded and kept."""
        ids: list[int] = []
        cache = self._cache
        for i, part in enumerate(self._split(text)):
            if i & 1:  # an added token (the split's captured group)
                ids.append(self._added[part])
            elif part:
                got = cache.pop(part, None)
                if got is None:
                    got = array("i", self._encode_one(part, add_special_tokens=False).ids)
                    self._size += len(got)
                cache[part] = got  # (re)inserted last: the most recently used
                ids.extend(got)
        if self._size > self.max_tokens:
            self._trim()
        return ids

    def _trim(self) -> None:
        """Drop the least recently used segments until half the budget is free."""
        cache = self._cache
        while cache and self._size > self.max_tokens // 2:
            self._size -= len(cache.pop(next(iter(cache))))

    def clear(self) -> None:
        """Forget every kept segment."""
        self._cache.clear()
        self._size = 0

    @property
    def kept_tokens(self) -> int:
        """How many ids are kept now."""
        return self._size
