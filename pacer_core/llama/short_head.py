"""A draft file whose head scores only the tokens a draft is likely to propose (FR-Spec, Zhao et al. 2025,
arXiv 2502.14856; docs/algorithms.md, "Reduced vocabulary").

The embedded target's Q4_1 file spends about a fifth of a draft step in its head: 49,152 rows of 576 weights,
read for every drafted token. A copy of the file whose token rows are reordered, most frequent first, and whose
metadata says ``pacer.head_rows = K`` has the patched llama.cpp (``scripts/patch_llama_source.py``) score only the
first K rows; the other logits come back as zeros and are never read. The copy's vocabulary list is the
original's, so the file still passes the tokenizer check, but its row ``r`` now holds token ``order[r]``: the
drafter feeds ``position_of[token]`` and reads row ``r``'s logit as token ``order[r]``'s (``ShortHeadVocabulary``).

Nothing here depends on the numerics: q is a distribution over the kept ids (q = 0 elsewhere), which keeps
speculative sampling exact, and SMC-SD's proposal spreads ``vocabulary.OFF_VOCABULARY_MASS`` over the rest.
A stock llama.cpp scores every row of such a file: the same logits over the kept ids, no time saved.

The copy is written once per source file and order into the cache folder (a few hundred milliseconds: the
token rows are moved as whole quantized blocks, nothing is requantized). GGUF's layout, as read here:
header (magic, version 3, tensor count, metadata count), metadata entries, tensor infos (name, dims, type,
offset into the data), padding to ``general.alignment``, the tensors' data."""
from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

HEAD_ROWS_KEY = "pacer.head_rows"          # the patched llama.cpp reads this (scripts/patch_llama_source.py)
TOKEN_ORDER_KEY = "pacer.token_order_sha"  # which order the rows are in, for a reader of the file (none here)
TOKEN_ROWS = ("token_embd.weight", "output.weight")     # tensors with a row per token
GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
HEADER_BYTES = 16 * 2 ** 20     # enough for a file's metadata and tensor infos (its vocabulary list included)

# metadata value types: fixed sizes, 8 = string, 9 = array (gguf.h's GGUF_TYPE_*)
SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY, UINT32 = 8, 9, 4
# bytes and values per block of the tensor types a token row may have (ggml.h's GGML_TYPE_*)
BLOCKS = {0: (4, 1), 1: (2, 1), 30: (2, 1), 2: (18, 32), 3: (20, 32), 6: (22, 32), 7: (24, 32), 8: (34, 32),
          9: (36, 32)}


class ShortHeadUnavailable(ValueError):
    """The file cannot be given a short head (an unknown layout or row type); the drafter keeps the full file."""


@dataclass
class TensorInfo:
    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int              # into the data section
    info_start: int          # where this info's offset field sits in the file (its 8 bytes end the info)


@dataclass
class GGUFLayout:
    metadata_end: int        # file offset after the last metadata entry
    metadata_count: int
    tensors: list[TensorInfo]
    alignment: int
    data_start: int
    architecture: str
    carries_short_head: bool     # the file is already a short-head copy


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        value = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return value[0]

    def string(self) -> str:
        length = self.take("Q")
        text = self.data[self.at: self.at + length].decode("utf-8", errors="replace")
        self.at += length
        return text

    def skip_value(self, value_type: int):
        """Move past one metadata value; returns it when it is a string or an integer (else None)."""
        if value_type == STRING:
            return self.string()
        if value_type == ARRAY:
            item_type, count = self.take("I"), self.take("Q")
            if item_type == STRING:
                for _ in range(count):
                    length = self.take("Q")
                    self.at += length
            elif item_type in SCALAR_SIZES:
                self.at += SCALAR_SIZES[item_type] * count
            else:
                raise ShortHeadUnavailable(f"unknown GGUF array type {item_type}")
            return None
        if value_type not in SCALAR_SIZES:
            raise ShortHeadUnavailable(f"unknown GGUF value type {value_type}")
        if value_type in (4, 5, 10, 11):
            return self.take({4: "I", 5: "i", 10: "Q", 11: "q"}[value_type])
        self.at += SCALAR_SIZES[value_type]
        return None


def read_layout(header: bytes) -> GGUFLayout:
    """The layout of a GGUF file from its first bytes (enough to hold its metadata and tensor infos)."""
    try:
        return _read_layout(header)
    except (struct.error, UnicodeDecodeError, ValueError) as failure:
        if isinstance(failure, ShortHeadUnavailable):
            raise
        raise ShortHeadUnavailable(f"the file's header could not be read ({failure})") from None


def _read_layout(header: bytes) -> GGUFLayout:
    reader = _Reader(header)
    if header[:4] != GGUF_MAGIC:
        raise ShortHeadUnavailable("not a GGUF file")
    reader.at = 4
    version = reader.take("I")
    if version != 3:
        raise ShortHeadUnavailable(f"GGUF version {version} (3 is read)")
    tensor_count, metadata_count = reader.take("Q"), reader.take("Q")
    alignment, architecture, carries_short_head = DEFAULT_ALIGNMENT, "", False
    for _ in range(metadata_count):
        key = reader.string()
        value = reader.skip_value(reader.take("I"))
        if key == "general.alignment":
            alignment = int(value)
        elif key == "general.architecture":
            architecture = str(value)
        elif key == HEAD_ROWS_KEY:
            carries_short_head = True
    metadata_end = reader.at
    tensors = []
    if not tensor_count:
        raise ShortHeadUnavailable("the file has no tensors")
    for _ in range(tensor_count):
        name = reader.string()
        dims = tuple(reader.take("Q") for _ in range(reader.take("I")))
        ggml_type = reader.take("I")
        info_start = reader.at
        tensors.append(TensorInfo(name, dims, ggml_type, reader.take("Q"), info_start))
    data_start = -(-reader.at // alignment) * alignment
    return GGUFLayout(metadata_end, metadata_count, tensors, alignment, data_start, architecture,
                      carries_short_head)


def row_bytes(tensor: TensorInfo) -> int:
    if tensor.ggml_type not in BLOCKS:
        raise ShortHeadUnavailable(f"{tensor.name} has a tensor type ({tensor.ggml_type}) this copy does not move")
    block_bytes, block_values = BLOCKS[tensor.ggml_type]
    if tensor.dims[0] % block_values:
        raise ShortHeadUnavailable(f"{tensor.name}'s rows are not whole blocks")
    return tensor.dims[0] // block_values * block_bytes


def _metadata_entry(key: str, value_type: int, payload: bytes) -> bytes:
    encoded = key.encode()
    return struct.pack("<Q", len(encoded)) + encoded + struct.pack("<I", value_type) + payload


def order_digest(order: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(order, dtype="<i4").tobytes()).hexdigest()[:16]


def full_order(kept_ids, vocab_size: int) -> np.ndarray:
    """Every id once: the kept ids in their order, then the others in id order."""
    kept = np.asarray(kept_ids, dtype=np.int64)
    if len(set(kept.tolist())) != len(kept) or (len(kept) and (kept.min() < 0 or kept.max() >= vocab_size)):
        raise ValueError("the kept ids must be distinct ids of the vocabulary")
    rest = np.setdiff1d(np.arange(vocab_size), kept, assume_unique=False)
    return np.concatenate([kept, rest]).astype(np.int32)


def write_short_head_file(source: Path, destination: Path, order: np.ndarray, head_rows: int) -> Path:
    """Copy ``source`` to ``destination`` with every token-row tensor's rows in ``order`` (row r = token
    order[r]) and the metadata ``pacer.head_rows = head_rows``; written to a temporary name, then renamed."""
    raw = source.read_bytes()
    layout = read_layout(raw)
    if layout.carries_short_head:
        raise ShortHeadUnavailable("the file is already a short-head copy")
    if layout.architecture != "llama":
        raise ShortHeadUnavailable(f"the patched head is in llama.cpp's llama graph; this file is "
                                   f"'{layout.architecture}'")
    extra = (_metadata_entry(HEAD_ROWS_KEY, UINT32, struct.pack("<I", head_rows))
             + _metadata_entry(TOKEN_ORDER_KEY, STRING, struct.pack("<Q", 16) + order_digest(order).encode()))
    infos_end = max(tensor.info_start + 8 for tensor in layout.tensors)
    header = bytearray(raw[:layout.metadata_end]) + extra + raw[layout.metadata_end: infos_end]
    struct.pack_into("<Q", header, 16, layout.metadata_count + 2)    # after magic, version and tensor count
    header += b"\0" * (-len(header) % layout.alignment)
    data = bytearray(raw[layout.data_start:])
    moved = 0
    for tensor in layout.tensors:
        if tensor.name not in TOKEN_ROWS:
            continue
        if tensor.dims[1] != len(order):
            raise ShortHeadUnavailable(f"{tensor.name} has {tensor.dims[1]} rows, the order {len(order)} ids")
        size = row_bytes(tensor) * tensor.dims[1]
        rows = np.frombuffer(raw, np.uint8, size, layout.data_start + tensor.offset).reshape(tensor.dims[1], -1)
        data[tensor.offset: tensor.offset + size] = rows[order].tobytes()
        moved += 1
    if not moved:
        raise ShortHeadUnavailable("the file has no token-row tensor")
    temporary = destination.with_name(destination.name + f".{os.getpid()}.part")
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary.write_bytes(bytes(header) + bytes(data))
    temporary.replace(destination)
    return destination


@dataclass
class ShortHeadVocabulary:
    """Which token each of a short-head file's rows holds: ``order[r]`` (the first ``head_rows`` are scored),
    and where each token sits, ``position_of[token]``."""
    order: torch.Tensor          # [V] long: row → token id
    position_of: np.ndarray      # [V] int64: token id → row
    head_rows: int

    @classmethod
    def from_order(cls, order: np.ndarray, head_rows: int) -> "ShortHeadVocabulary":
        position_of = np.empty(len(order), dtype=np.int64)
        position_of[order] = np.arange(len(order))
        return cls(torch.as_tensor(order, dtype=torch.long), position_of, head_rows)

    @property
    def kept_ids(self) -> torch.Tensor:
        return self.order[: self.head_rows]


def token_count(source: Path) -> int:
    """How many tokens a GGUF file has rows for (its token embedding's rows)."""
    with open(source, "rb") as handle:
        header = handle.read(HEADER_BYTES)
    layout = read_layout(header)
    rows = [tensor.dims[1] for tensor in layout.tensors if tensor.name == TOKEN_ROWS[0]]
    if not rows:
        raise ShortHeadUnavailable("the file has no token embedding")
    return rows[0]


def prepare(source: Path, kept_ids, head_rows: int, cache_dir: Path) -> tuple[Path, ShortHeadVocabulary]:
    """The short-head copy of ``source`` scoring the first ``head_rows`` of ``kept_ids`` (then other ids in id
    order, when fewer are ranked), written once under ``cache_dir``, and its vocabulary; ShortHeadUnavailable
    when the file cannot have one."""
    tokens = token_count(source)
    if not 0 < head_rows < tokens:
        raise ShortHeadUnavailable(f"a head of {head_rows} rows in a file of {tokens} tokens is not short")
    order = full_order(list(kept_ids)[:head_rows], tokens)    # fewer ranked: the rest by id
    destination = short_head_path(source, order, head_rows, cache_dir)
    if not destination.exists():
        write_short_head_file(source, destination, order, head_rows)
    return destination, ShortHeadVocabulary.from_order(order, head_rows)


def short_head_path(source: Path, order: np.ndarray, head_rows: int, cache_dir: Path) -> Path:
    """Where the copy of ``source`` for this order and head is kept (one file per source, order and head)."""
    stat = source.stat()
    key = hashlib.sha256(f"{source.resolve()} {stat.st_size} {int(stat.st_mtime)} {order_digest(order)} "
                         f"{head_rows}".encode()).hexdigest()[:16]
    return cache_dir / f"{source.stem}.head{head_rows}.{key}.gguf"
