"""The course's Triton kernels, as plain Python functions (not yet decorated).

They are wrapped by `perflab.gemm.triton_matmul.jitted`, which decides per call site whether a
kernel is compiled for a GPU (`triton.runtime.jit.JITFunction`) or run by Triton's interpreter on
the CPU (`InterpretedFunction`). Triton 3.x reads `TRITON_INTERPRET` when `@triton.jit` runs, so a
decorator at import time would fix the mode for the whole process; building both wrappers from the
same function keeps the compile-for-sm_90 path and the run-on-this-CPU path in one process.

Importing this module imports `triton.language`; callers check `triton_matmul.available()` first.
Triton needs the source of a kernel, so these functions must stay in a real .py file.
"""

# Triton kernels use a language of their own inside Python syntax: no type annotations beyond
# tl.constexpr, and no `from __future__ import annotations` (Triton reads the annotations).
import triton.language as tl


def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  WIDEN: tl.constexpr = False):  # pyright: ignore[reportArgumentType]  # Triton wraps the default
    """C[M×N] = A[M×K] · B[K×N], one BLOCK_M × BLOCK_N output tile per program, fp32 accumulation.

    Tiles are visited in groups of GROUP_M tile-rows (the "grouped" or swizzled order of Triton's
    matmul tutorial): consecutive programs share the same columns of B and a few rows of A, so
    more of what they read is still in L2. Masks make any M, N, K correct.

    WIDEN converts the A and B tiles to fp32 before tl.dot. Only the interpreter uses it, for bf16:
    Triton 3.9's interpreter multiplies bf16 dot operands as raw 16-bit integers (checked here:
    errors of 1e10). Widening is exact (every bf16 is an fp32), and a Tensor Core also forms exact
    products and sums them in fp32, so the answer is the one the GPU computes; compiled kernels
    never widen.
    """
    pid = tl.program_id(0)
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M  # tl.cdiv is itself a @jit helper: inlined so the interpreter needs no env var
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, (K + BLOCK_K - 1) // BLOCK_K):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        if WIDEN:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def bias_gelu_kernel(x_ptr, bias_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    """y = gelu_tanh(x + bias) for a row-major [n_rows × n_cols] x and a [n_cols] bias, in one pass.

    Eager PyTorch runs the stand-alone gelu(x + bias) as two kernels (an add, then GeLU) and writes
    and reads x + bias once in between; fused, each element is read once and written once. (After a
    real nn.Linear the bias is already inside addmm, so there only the GeLU is left to fuse.) The arithmetic is done in fp32 and
    the result is stored in y's dtype. GeLU's tanh form: 0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³))),
    with tanh written through exp so the kernel needs no libdevice call.
    """
    row = tl.program_id(0)
    col_block = tl.program_id(1)
    cols = col_block * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    v = x + b
    inner = 0.7978845608028654 * (v + 0.044715 * v * v * v)
    # tanh(u) = 1 - 2 / (exp(2u) + 1). |u| is clamped at 15, where tanh is ±1 to fp32's precision
    # (1 - tanh(15) ≈ 1.9e-13), so exp never overflows.
    inner = tl.minimum(tl.maximum(inner, -15.0), 15.0)
    t = 1.0 - 2.0 / (tl.exp(2.0 * inner) + 1.0)
    y = 0.5 * v * (1.0 + t)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def flash_attention_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, seq_len, n_heads, qk_scale,
                               stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                               stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os,
                               HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               CAUSAL: tl.constexpr, WIDEN: tl.constexpr = False):  # pyright: ignore[reportArgumentType]
    """O = softmax(Q·Kᵀ·scale)·V for one BLOCK_M tile of queries of one (batch, head); fp32 accumulation.

    Q, K, V, O are [batch, heads, seq, HEAD_DIM] with a unit stride along the head dimension; the
    grid is (⌈seq/BLOCK_M⌉, batch·heads). The program loads its Q tile once, then streams K and V
    in BLOCK_N-row blocks (FlashAttention-2's loop order, Dao 2023 §3.1: K and V are read once per
    Q tile; FlashAttention's own Algorithm 1 has K and V in the outer loop), and keeps an online
    softmax (Milakov & Gimelshein 2018 for the running max and sum; Dao et al. 2022 §3.1 for
    rescaling the output accumulator):

    * m, the running row maximum of the scores (starts at −∞),
    * l, the running sum of exp(score − m),
    * acc, the running Σ exp(score − m)·V, rescaled by exp(m_old − m_new) whenever m grows,

    and divides acc by l once at the end (FlashAttention-2's deferred normalisation). It also
    stores the log-sum-exp m + log l of every row (fp32), which a backward needs to recompute P.
    Scores use exp2, as Triton's fused-attention tutorial does: the caller passes qk_scale = scale·log2(e)
    (scale = 1/√d), so exp2(qk_scale·q·k) = exp(scale·q·k).

    Masks: query rows and key columns at or past seq_len are never loaded or stored (any length
    works); with CAUSAL, query i sees keys 0..i, and the loop stops after the block holding the
    tile's last row, so about half the K/V blocks are never read. WIDEN: as in matmul_kernel, the
    interpreter's bf16 dot needs fp32 operands; compiled kernels never widen.
    """
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seq_len

    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    if WIDEN:
        q = q.to(tl.float32)

    m_i = tl.zeros((BLOCK_M,), dtype=tl.float32) - float("inf")
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)

    if CAUSAL:
        hi = min(seq_len, (pid_m + 1) * BLOCK_M)
    else:
        hi = seq_len
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < seq_len
        k = tl.load(k_base + cols[None, :] * stride_ks + offs_d[:, None], mask=col_ok[None, :], other=0.0)  # Kᵀ block
        v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        if WIDEN:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, k) * qk_scale
        keep = col_ok[None, :]
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= cols[None, :])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)  # how much the old running values shrink
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new

    acc = acc / l_i[:, None]
    o_base = o_ptr + b * stride_ob + h * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :], acc.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # back to natural log: ln 2
    tl.store(lse_ptr + pid_bh * seq_len + offs_m, lse, mask=row_ok)
