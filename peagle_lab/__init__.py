"""peagle_lab — learn, measure and train P-EAGLE (parallel drafting) against EAGLE-3.

Glossary (the names used everywhere in the package):

- ``K`` / ``num_speculative_tokens``: draft tokens per step; ``c``: concurrency, requests
  decoded together in one batch.
- accepted / recovered / bonus tokens: as vLLM's rejection sampler defines them; the token
  appended after the accepted drafts is the recovered one (a draft was rejected) or the
  bonus one (all K accepted).
- acceptance length (AL) = 1 + accepted / drafts (counts the bonus token); acceptance rate =
  accepted / drafted; per-position acceptance = accepted at position i / drafts
  (unconditional); TPS = output tokens per second over all requests.
- ``target_probs`` / ``draft_probs``: the two distributions in rejection sampling.
- ``aux_layer_ids``, taps: target hidden states entering those layers, concatenated [.., 3H].
- ``mask_token_id``, ``mask_hidden`` (3H, pre-fc), ``shared_hidden`` = fc(mask_hidden).
- anchor, depth, COD, segment: the P-EAGLE training vocabulary (see ``peagle_lab.train``).
- ``slot_mapping``: flat KV-cache slot per token; -1 writes nothing.

Public API: ``load_model`` / ``load_default`` (the target), ``Drafter`` / ``DrafterConfig``,
``SpecDecoder`` / ``SpecConfig``, ``verify_greedy`` / ``verify_rejection``,
``draft_parallel`` / ``draft_autoregressive``, ``load_head`` / ``save_head``.
"""
from .config import DrafterConfig, SpecConfig
from .drafter import Drafter
from .drafting import draft_autoregressive, draft_parallel
from .engine import GenerationResult, Metrics, SpecDecoder
from .heads.io import load_head, save_head
from .verify import VerifyResult, verify_greedy, verify_rejection
from .zoo import load_default, load_model

__all__ = [
    "Drafter", "DrafterConfig", "GenerationResult", "Metrics", "SpecConfig", "SpecDecoder", "VerifyResult",
    "draft_autoregressive", "draft_parallel", "load_default", "load_head", "load_model", "save_head",
    "verify_greedy", "verify_rejection",
]
__version__ = "0.1.0"
