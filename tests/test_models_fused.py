"""FusedLinear: one matrix product for q/k/v and gate/up in inference, nothing changed elsewhere."""
import torch

from peagle_lab.models.checkpoints import load_hf_folder, save_hf_folder
from peagle_lab.models.llama import fuse_projections
from peagle_lab.testing import tiny_target


def _inputs(model, c=2, T=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (c, T), generator=g)
    return ids, torch.arange(T).expand(c, T)


def _count_linear_calls(model, ids, pos):
    calls = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: calls.append(type(m).__name__) if isinstance(m, torch.nn.Linear) else None)
    try:
        with torch.inference_mode():
            model(ids, pos)
    finally:
        handle.remove()
    return len(calls)


def test_fused_forward_equals_unfused_and_runs_fewer_linears():
    model = tiny_target()
    ids, pos = _inputs(model)
    with torch.inference_mode():
        ref = model(ids, pos).logits
    n_before = _count_linear_calls(model, ids, pos)
    assert fuse_projections(model) == 2 * model.config.num_hidden_layers
    with torch.inference_mode():
        got = model(ids, pos).logits
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    # q/k/v and gate/up no longer go through their nn.Linear modules: 3 + 2 fewer calls per layer
    assert _count_linear_calls(model, ids, pos) == n_before - 5 * model.config.num_hidden_layers


def test_fusion_keeps_parameters_state_dict_and_training():
    model = tiny_target()
    params_before = dict(model.named_parameters())
    sd_before = {k: v.clone() for k, v in model.state_dict().items()}
    fuse_projections(model)
    assert dict(model.named_parameters()).keys() == params_before.keys()
    assert all(p is params_before[n] for n, p in model.named_parameters())  # same objects
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, sd_before[k], rtol=0, atol=0)
    # with autograd on, the separate layers run and their weights get gradients; an in-place
    # optimizer step lands in the fused tensor too
    ids, pos = _inputs(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(ids, pos).logits.sum().backward()
    q = model.layers[0].self_attn.q_proj.weight
    assert q.grad is not None and q.grad.abs().sum() > 0
    opt.step()
    attn = model.layers[0].self_attn
    assert attn.qkv.fused
    torch.testing.assert_close(attn.qkv._weight[: q.shape[0]], q.detach(), rtol=0, atol=0)


def test_fused_model_saves_and_reloads(tmp_path):
    model = tiny_target()
    fuse_projections(model)
    save_hf_folder(model, tmp_path / "m")
    again = load_hf_folder(tmp_path / "m")
    ids, pos = _inputs(again)
    with torch.inference_mode():
        torch.testing.assert_close(again(ids, pos).logits, model(ids, pos).logits, rtol=1e-5, atol=1e-5)


def test_to_drops_the_fused_copy():
    model = tiny_target()
    fuse_projections(model)
    model.to(torch.float64)
    attn = model.layers[0].self_attn
    assert not attn.qkv.fused and attn.qkv._weight is None
    ids, pos = _inputs(model)
    with torch.inference_mode():
        assert model(ids, pos).logits.dtype == torch.float32  # still runs, unfused
