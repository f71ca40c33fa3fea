"""Unit tests for paper_suite.algorithms.trinv against references that share none of its code:
SciPy's triangular solver, NumPy loops, closed forms, exact integer arithmetic and brute-force sums."""
import math

import numpy as np
import pytest
import scipy.linalg as sla
import torch

from paper_suite.algorithms.trinv import (
    METHODS, DeltaNetLayer, closed_form_inverse, closed_form_power_max, correlated_keys, delta_rule_chunked,
    delta_rule_matrix, delta_rule_recurrent, flop_counts, invert_blocked, invert_neumann, invert_newton_schulz,
    invert_unit_lower, power_norm_max, series_steps, unit_roundoff)


def random_A(n, C, rho=0.0, seed=0, d=16):
    K, beta = correlated_keys(n, C, d, rho, seed=seed)
    return delta_rule_matrix(K, beta)


def scipy_inv(A):
    a = A.double().numpy()
    return np.stack([sla.solve_triangular(x, np.eye(a.shape[-1]), lower=True, unit_diagonal=True) for x in a])


def test_methods_constant():
    assert set(METHODS) >= {"forward", "blocked", "neumann", "newton_schulz"}


def test_delta_rule_matrix_matches_loop():
    rng = np.random.default_rng(0)
    K, beta = rng.normal(size=(2, 7, 5)), rng.uniform(size=(2, 7))
    A = delta_rule_matrix(torch.from_numpy(K), torch.from_numpy(beta)).numpy()
    for b in range(2):
        for i in range(7):
            for j in range(7):
                want = 1.0 if i == j else (beta[b, i] * K[b, i] @ K[b, j] if i > j else 0.0)
                assert A[b, i, j] == pytest.approx(want, abs=1e-14)


@pytest.mark.parametrize("method", ["forward", "blocked", "neumann", "newton_schulz"])
@pytest.mark.parametrize("C", [1, 2, 5, 16, 33, 64])
def test_inverse_matches_scipy_float64(method, C):
    A = random_A(3, C, seed=C)
    X = invert_unit_lower(A, method)
    assert X.shape == A.shape and X.dtype == torch.float64
    np.testing.assert_allclose(X.numpy(), scipy_inv(A), atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("method", ["forward", "blocked", "neumann", "newton_schulz"])
def test_dtype_kept_and_iid_accuracy(method, dtype):
    A = random_A(4, 32, seed=1).to(dtype)
    X = invert_unit_lower(A, method)
    assert X.dtype == dtype
    ref = scipy_inv(A)
    err = np.linalg.norm(X.double().numpy() - ref) / np.linalg.norm(ref)
    assert err < 16 * unit_roundoff(dtype)


def test_unknown_method_and_base():
    A = random_A(1, 4)
    with pytest.raises(ValueError):
        invert_unit_lower(A, "cholesky")
    with pytest.raises(ValueError):
        invert_blocked(A, base_method="lu")


def test_exact_on_integer_matrices_and_step_count():
    g = torch.Generator().manual_seed(5)
    C = 32
    A = (torch.tril(torch.randint(-1, 2, (4, C, C), generator=g), -1) + torch.eye(C, dtype=torch.long)).double()
    X_true = np.rint(np.linalg.inv(A.numpy()))          # integer inverse; LU in float64 rounds back exactly
    np.testing.assert_array_equal((A.numpy() @ X_true).round(), np.broadcast_to(np.eye(C), (4, C, C)))
    for m in METHODS:
        np.testing.assert_array_equal(invert_unit_lower(A, m).numpy(), X_true)
    # with one step fewer the series miss (-L)^16..(-L)^31, which is nonzero for L = N (all ones below the diagonal)
    An = torch.eye(C, dtype=torch.float64) + torch.tril(torch.ones(C, C, dtype=torch.float64), -1)
    Xn = closed_form_inverse(C, 1.0).numpy()
    m = series_steps(C)
    assert m == 5
    for f in (invert_neumann, invert_newton_schulz):
        np.testing.assert_array_equal(f(An, m).numpy(), Xn)
        assert np.abs(f(An, m - 1).numpy() - Xn).max() >= 1


def test_newton_schulz_iterates_are_neumann_partial_sums():
    A = random_A(2, 16, rho=0.3, seed=2)
    L = (A - torch.eye(16, dtype=torch.float64)).numpy()
    for k in range(0, 5):
        S = sum(np.linalg.matrix_power(-L, j) for j in range(2 ** k))
        np.testing.assert_allclose(invert_newton_schulz(A, k).numpy(), S, atol=1e-12)
        if k >= 1:
            np.testing.assert_allclose(invert_neumann(A, k).numpy(), S, atol=1e-12)


def test_blocked_any_base_and_hybrid():
    A = random_A(2, 40, rho=0.2, seed=3)
    ref = scipy_inv(A)
    for base in (1, 3, 8, 16, 40, 64):
        for bm in ("forward", "neumann", "newton_schulz"):
            np.testing.assert_allclose(invert_blocked(A, base=base, base_method=bm).numpy(), ref, atol=1e-11)


def test_closed_form_example():
    for C, c in ((10, 0.3), (17, 1.0), (12, 1.6)):
        A = np.eye(C) + c * np.tril(np.ones((C, C)), -1)
        np.testing.assert_allclose(closed_form_inverse(C, c).numpy(),
                                   sla.solve_triangular(A, np.eye(C), lower=True), atol=1e-12)
        L = A - np.eye(C)
        brute = max(np.linalg.matrix_power(L, k).max() for k in range(1, C))
        assert closed_form_power_max(C, c) == pytest.approx(brute, rel=1e-12)


def test_series_unstable_direct_stable_on_identical_keys():
    C, c = 64, 0.7
    A = (torch.eye(C, dtype=torch.float64) + c * torch.tril(torch.ones(C, C, dtype=torch.float64), -1))
    ref = closed_form_inverse(C, c).numpy()
    err = {m: np.linalg.norm(invert_unit_lower(A.float(), m).double().numpy() - ref) / np.linalg.norm(ref)
           for m in METHODS}
    assert err["forward"] < 1e-6 and err["blocked"] < 1e-6
    assert err["neumann"] > 1 and err["newton_schulz"] > 1


def test_power_norm_max_brute_force():
    A = random_A(3, 12, rho=0.8, seed=4)
    L = (A - torch.eye(12, dtype=torch.float64)).numpy()
    for b in range(3):
        brute = max(np.linalg.norm(np.linalg.matrix_power(L[b], k), 2) for k in range(1, 12))
        assert power_norm_max(A)[b].item() == pytest.approx(brute, rel=1e-10)


def test_flop_counts():
    fc = flop_counts(64, base=16)
    assert fc["forward"]["flops"] == sum(2 * i * i for i in range(64))
    assert fc["neumann"]["flops"] == (2 * 6 - 2) * 2 * 64 ** 3
    assert fc["newton_schulz"]["depth"] == 12 and fc["forward"]["depth"] == 63


def numpy_delta_rule(q, k, v, beta, S0):
    """Eq. (1), written independently in NumPy for one (batch, head)."""
    S, out = S0.copy(), []
    for t in range(k.shape[0]):
        S = S @ (np.eye(k.shape[1]) - beta[t] * np.outer(k[t], k[t])) + beta[t] * np.outer(v[t], k[t])
        out.append(S @ q[t])
    return np.array(out), S


@pytest.mark.parametrize("method", ["forward", "blocked", "neumann", "newton_schulz"])
def test_chunked_and_recurrent_match_numpy(method):
    rng = np.random.default_rng(7)
    B, H, T, dk, dv = 2, 2, 45, 6, 5
    q = rng.normal(size=(B, H, T, dk))
    k = rng.normal(size=(B, H, T, dk)); k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v, beta = rng.normal(size=(B, H, T, dv)), rng.uniform(size=(B, H, T))
    S0 = rng.normal(size=(B, H, dv, dk))
    t = [torch.from_numpy(x) for x in (q, k, v, beta, S0)]
    o_c, S_c = delta_rule_chunked(*t[:4], chunk_size=16, method=method, S0=t[4])
    o_r, S_r = delta_rule_recurrent(*t[:4], S0=t[4])
    for b in range(B):
        for h in range(H):
            o_np, S_np = numpy_delta_rule(q[b, h], k[b, h], v[b, h], beta[b, h], S0[b, h])
            for o, S in ((o_c, S_c), (o_r, S_r)):
                np.testing.assert_allclose(o[b, h].numpy(), o_np, atol=1e-10)
                np.testing.assert_allclose(S[b, h].numpy(), S_np, atol=1e-10)


def test_chunked_inverse_dtype_option():
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.nn.functional.normalize(torch.randn(1, 2, 32, 8, generator=g), dim=-1) for _ in range(3))
    beta = torch.rand(1, 2, 32, generator=g)
    o32, _ = delta_rule_chunked(q, k, v, beta, 16, "blocked")
    o64, _ = delta_rule_chunked(q, k, v, beta, 16, "blocked", inv_dtype=torch.float64)
    assert o64.dtype == torch.float32
    torch.testing.assert_close(o32, o64, atol=1e-5, rtol=1e-5)


def test_layer_chunked_equals_recurrent():
    layer = DeltaNetLayer(16, 2, seed=1).double()
    x = torch.randn(2, 30, 16, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    with torch.no_grad():
        y = layer(x, recurrent=True)
        assert y.shape == (2, 30, 16)
        for m in METHODS:
            torch.testing.assert_close(layer(x, method=m, chunk_size=8), y, atol=1e-10, rtol=1e-10)
