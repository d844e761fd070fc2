"""Documents for the knowledge index: loading a folder of ``.txt`` files, chunking, Q/A pairs.

Two ways to turn files into indexable documents, the two modes of Rasa's enterprise search:

* **Passages** (generative search): each file is cut into chunks of at most ``chunk_size``
  characters that overlap by up to ``chunk_overlap`` characters (1000 and 20 by default, as Rasa
  cuts them). The cut prefers paragraph breaks, then line breaks, then spaces, then any character;
  a separator stays at the start of the piece that follows it.
* **Question/answer pairs** (extractive search, ``use_generative_llm: false``): each file holds
  entries separated by a blank line, each entry ``Q: <question>`` on one line and ``A: <answer>``
  after it. One document per entry: its text is the question (what the index matches), the answer
  travels in ``metadata["answer"]``.

Every document carries ``metadata["source"]``, the file it came from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from subagents.exceptions import ConfigError, ConfigIssue

__all__ = ["DEFAULT_CHUNK_OVERLAP", "DEFAULT_CHUNK_SIZE", "Document", "TextSplitter",
           "document_files", "load_documents", "parse_qa_documents", "split_documents"]

log = structlog.get_logger("subagents.knowledge")

DEFAULT_CHUNK_SIZE = 1000
DEFAULT_CHUNK_OVERLAP = 20
SEPARATORS = ("\n\n", "\n", " ", "")
"""Where a chunk may end, most preferred first; ``""`` cuts anywhere."""

QA_ENTRY_SEPARATOR = "\n\n"
_QA_ENTRY = re.compile(r"Q:\s*(?P<question>.*?)\s*\n\s*A:\s*(?P<answer>.*)", re.DOTALL)


@dataclass(frozen=True)
class Document:
    """A piece of text the index can return, with what is known about it."""

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored beside a persisted index."""
        return {"text": self.text, "metadata": self.metadata}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Document:
        """Read the JSON form back; raise ValueError if it is not one."""
        text, metadata = data.get("text"), data.get("metadata", {})
        if not isinstance(text, str) or not isinstance(metadata, dict):
            raise ValueError("a stored document needs a text string and a metadata mapping")
        return cls(text, metadata)


def document_files(folder: Path) -> list[Path]:
    """Every ``.txt`` file under ``folder`` (recursively), in a stable order."""
    return sorted(p for p in folder.glob("**/*.txt") if p.is_file())


def load_documents(folder: Path, *, display_root: Path | None = None) -> list[Document]:
    """One document per ``.txt`` file under ``folder``, read as UTF-8.

    Args:
        folder: The documents folder.
        display_root: When given, ``metadata["source"]`` is the file's path relative to it (for
            example ``docs/faq.txt`` with the project folder as root); otherwise the path as found.

    Raises:
        ConfigError: A file is not UTF-8 (``search.document_unreadable``).
    """
    documents = []
    for path in document_files(folder):
        source = path
        if display_root is not None:
            try:
                source = path.relative_to(display_root)
            except ValueError:
                source = path
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(ConfigIssue(
                "search.document_unreadable", f"{source} is not UTF-8 text ({exc.reason} at "
                f"byte {exc.start})", file=str(source),
                hint="save the file as UTF-8, or move it out of the documents folder")) from exc
        documents.append(Document(text, {"source": str(source)}))
    return documents


class TextSplitter:
    """Cuts text into chunks of at most ``chunk_size`` characters with a small overlap.

    The text is split at the most preferred separator it contains; pieces that are still too long
    are split again at the next separator, and short pieces are packed together up to
    ``chunk_size``. When a chunk is emitted, the pieces at its end (up to ``chunk_overlap``
    characters) begin the next one. Chunks are stripped of surrounding whitespace and empty ones
    dropped. A piece that no separator can shorten (only possible with an empty separator list)
    is kept whole.
    """

    def __init__(self, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 chunk_overlap: int = DEFAULT_CHUNK_OVERLAP) -> None:
        if chunk_size <= 0 or chunk_overlap < 0 or chunk_overlap > chunk_size:
            raise ValueError(f"need 0 <= chunk_overlap <= chunk_size and chunk_size > 0, got "
                             f"chunk_size={chunk_size}, chunk_overlap={chunk_overlap}")
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap

    def split(self, text: str) -> list[str]:
        """The chunks of ``text``, in order."""
        return self._split(text, SEPARATORS)

    def _split(self, text: str, separators: Sequence[str]) -> list[str]:
        separator = separators[-1]
        finer: tuple[str, ...] = ()
        for position, candidate in enumerate(separators):
            if candidate == "" or candidate in text:
                separator, finer = candidate, tuple(separators[position + 1:])
                break
        chunks: list[str] = []
        short: list[str] = []
        for piece in _pieces(text, separator):
            if len(piece) < self.chunk_size:
                short.append(piece)
                continue
            chunks += self._pack(short)
            short = []
            chunks += self._split(piece, finer) if finer else [piece]
        return chunks + self._pack(short)

    def _pack(self, pieces: Iterable[str]) -> list[str]:
        """Join consecutive pieces into chunks up to ``chunk_size``, overlapping at the joins."""
        chunks: list[str] = []
        window: list[str] = []
        size = 0
        for piece in pieces:
            if window and size + len(piece) > self.chunk_size:
                _emit(chunks, window)
                while window and (size > self.chunk_overlap
                                  or size + len(piece) > self.chunk_size):
                    size -= len(window.pop(0))
            window.append(piece)
            size += len(piece)
        _emit(chunks, window)
        return chunks


def _pieces(text: str, separator: str) -> list[str]:
    """``text`` cut before each occurrence of ``separator`` (which stays with what follows)."""
    if not separator:
        return list(text)
    parts = text.split(separator)
    pieces = [parts[0]] + [separator + part for part in parts[1:]]
    return [piece for piece in pieces if piece]


def _emit(chunks: list[str], window: list[str]) -> None:
    chunk = "".join(window).strip()
    if chunk:
        chunks.append(chunk)


def split_documents(documents: Iterable[Document], splitter: TextSplitter | None = None
                    ) -> list[Document]:
    """Chunk each document; every chunk keeps a copy of its document's metadata."""
    splitter = splitter or TextSplitter()
    return [Document(chunk, dict(document.metadata))
            for document in documents for chunk in splitter.split(document.text)]


def parse_qa_documents(documents: Iterable[Document]) -> list[Document]:
    """One document per ``Q:``/``A:`` entry; malformed entries (and entries with an empty
    question or answer) are skipped with a warning.

    Each result's text is the question; its metadata is the file's metadata plus ``title`` (the
    question as an identifier: lower case, words joined by ``_``, other characters dropped),
    ``type: faq`` and ``answer``.
    """
    pairs: list[Document] = []
    for document in documents:
        for entry in document.text.strip().split(QA_ENTRY_SEPARATOR):
            match = _QA_ENTRY.match(entry.strip())
            if not match or not match["question"].strip() or not match["answer"].strip():
                log.warning("search.qa.entry_skipped", source=document.metadata.get("source"),
                            entry=entry.strip()[:100])
                continue
            question, answer = match["question"].strip(), match["answer"].strip()
            pairs.append(Document(question, {**document.metadata, "title": qa_title(question),
                                             "type": "faq", "answer": answer}))
    _warn_duplicates(pairs)
    return pairs


def qa_title(question: str) -> str:
    """``What is Finley?`` -> ``what_is_finley``."""
    title = re.sub(r"\s+", "_", question.lower())
    title = re.sub(r"[^\w]", "", title)
    return re.sub(r"_+", "_", title).strip("_")


def _warn_duplicates(pairs: list[Document]) -> None:
    answers: dict[str, str] = {}
    for pair in pairs:
        answer = str(pair.metadata.get("answer", ""))
        if pair.text not in answers:
            answers[pair.text] = answer
        elif answers[pair.text] == answer:
            log.warning("search.qa.duplicate_pair", question=pair.text)
        else:
            log.warning("search.qa.conflicting_answers", question=pair.text)
