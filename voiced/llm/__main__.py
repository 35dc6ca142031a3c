"""``python -m voiced.llm FD``: the LLM worker process, started by ``voiced.llm.worker.LlmWorker`` only."""

import sys

from voiced.llm.worker import serve

if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.exit("usage: python -m voiced.llm FD  (started by the voiced daemon, not by hand)")
    serve(int(sys.argv[1]))
