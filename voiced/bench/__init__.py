"""Benchmarks that print JSON figures, one module per subject, all under ``voiced bench``.

Not tests: nothing here asserts a time. Shared timing and process figures live in
``voiced.bench.common``; the command line in ``voiced.bench.cli``. Modules are imported only
when their benchmark runs, so ``voiced --help`` stays fast.
"""
