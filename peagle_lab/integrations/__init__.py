"""Bridges to serving systems. ``peagle_lab.integrations.vllm``: export heads vLLM serves with
``parallel_drafting``, import public heads, and benchmark vLLM on our workloads."""
