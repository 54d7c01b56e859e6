"""llama.cpp (through llama-cpp-python): the one package that imports it. Where the target runs on a CPU, and what
the gguf drafter stands on.

* ``model.py``: a GGUF file loaded once (``GGUFModel``), the pool of contexts its runs decode in
  (``ContextPool``), the import of the binding and why it cannot run (``GGUFUnavailable``, ``llama_unavailable``).
* ``cache.py``: one run's state in a pooled context (``GGUFCache``), a ``kvcache.ModelCache``; the gguf drafter's
  cache, and the base of the target's.
* ``target.py``: the target run by llama.cpp on a float32 GGUF of its own weights (``LlamaTarget``,
  ``LlamaTargetCache``: row-invariant calls, so greedy speculative decoding returns AR's tokens).
* ``engine.py``: which engine runs a pair's target, torch or llama.cpp (``choose_engine`` at load,
  ``active_engine`` and ``target_cache`` for each run).
* ``proof.py``: a native build proven in a child process before the app trusts it (also a script:
  ``python -m pacer_core.llama.proof``); ``availability.py``: why llama.cpp cannot run a file here.

The gguf drafter itself is one kind among the drafters (``drafters/gguf_drafter.py``). This package imports
``kvcache`` and ``embedded`` only; the drafters, the loader and the decoders import it. Docs: docs/architecture.md."""
