# The peer of the GDN prefill, measured on the same GPU in the same run as gdn.bench.mjs (which
# runs this with the cases as its one argument, JSON): flash-linear-attention's chunked gated
# delta rule (fla.ops.gated_delta_rule.chunk_gated_delta_rule, Triton) at the Qwen3-Next-80B layer
# shape, H_k 16 key heads, H_v 32 value heads, d_k = d_v = 128: bf16 q, k, v, f32 log-decay g and
# β, the q/k L2 norms in the kernel, an f32 state in and out, the sequences of a case as one
# varlen batch (cu_seqlens). Per case: warm-up, then the median of CUDA-event timings. Prints one
# JSON line; on anything missing (torch, fla, a GPU), a line that says why, and exits 0.
# fla (flash-linear-attention, MIT) comes from PYTHONPATH: gdn.bench.mjs puts the repository's
# git-ignored .peers/ (or $METRALE_PEERS_DIR) there.
import json
import sys


def main():
    cases = json.loads(sys.argv[1])
    try:
        import torch
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception as e:  # noqa: BLE001 - any import failure means no peer
        print(json.dumps({'peer': 'fla', 'measured': False, 'reason': f'{type(e).__name__}: {e}'}))
        return
    if not torch.cuda.is_available():
        print(json.dumps({'peer': 'fla', 'measured': False, 'reason': 'torch sees no CUDA device'}))
        return
    import fla

    hk, hv, d = 16, 32, 128
    reps = 20
    out = {'peer': 'fla', 'measured': True, 'fla': getattr(fla, '__version__', '?'), 'torch': torch.__version__, 'cases': []}
    gen = torch.Generator(device='cuda').manual_seed(0)
    for case in cases:
        lens = case['lens']
        t = sum(lens)
        dev = dict(device='cuda')
        q = torch.randn(1, t, hk, d, generator=gen, dtype=torch.bfloat16, **dev)
        k = torch.randn(1, t, hk, d, generator=gen, dtype=torch.bfloat16, **dev)
        v = torch.randn(1, t, hv, d, generator=gen, dtype=torch.bfloat16, **dev)
        # A decay in (−1, 0) per step and β in (0, 1), as the layer's gates give them.
        g = -torch.rand(1, t, hv, generator=gen, dtype=torch.float32, **dev) * 0.5 - 0.01
        beta = torch.rand(1, t, hv, generator=gen, dtype=torch.float32, **dev)
        h0 = torch.zeros(len(lens), hv, d, d, dtype=torch.float32, **dev)
        cu = torch.tensor([0] + [sum(lens[: i + 1]) for i in range(len(lens))], dtype=torch.long, **dev) if len(lens) > 1 else None

        def run():
            return chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)

        for _ in range(3):
            run()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            run()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        times.sort()
        out['cases'].append({'name': case['name'], 'lens': lens, 'ms': times[len(times) // 2], 'minMs': times[0], 'reps': reps})
    print(json.dumps(out))


main()
