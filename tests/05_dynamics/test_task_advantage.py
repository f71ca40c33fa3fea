"""Tests of paper_suite.dynamics.task_advantage against references that share no code with it: brute-force
enumeration of all compositions with explicit loops, torch autograd of E_π[R], Monte Carlo, and closed forms."""
import itertools
import math

import numpy as np
import pytest
import torch

from paper_suite.dynamics.task_advantage import (TransformerPolicy, chain_logits, chain_table,
                                                 conditional_success, expected_policy_gradient,
                                                 factorized_conditional_success, factorized_policy_gradient,
                                                 grpo_advantages, kl_gradient, reinforce_gradient, sample_actions,
                                                 shortcut_logits, shortcut_ode, shortcut_tables, softmax, success,
                                                 table_rewards, task_advantage_ratio, train_policy)


def brute(logits, R):
    """Pr[R | a_s = j] and Pr[R | a_s ≠ j] by looping over every composition."""
    S, K = logits.shape
    pi = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    num, den = np.zeros((S, K)), np.zeros((S, K))
    num_n, den_n = np.zeros((S, K)), np.zeros((S, K))
    for a in itertools.product(range(K), repeat=S):
        w = math.prod(pi[s, a[s]] for s in range(S))
        for s in range(S):
            for j in range(K):
                if a[s] == j:
                    num[s, j] += w * R[a]; den[s, j] += w
                else:
                    num_n[s, j] += w * R[a]; den_n[s, j] += w
    return num / den, num_n / den_n


@pytest.mark.parametrize("S,K,seed", [(1, 3, 0), (2, 2, 1), (3, 3, 2), (4, 2, 3)])
def test_conditional_success_and_ratio_match_brute_force(S, K, seed):
    g = np.random.default_rng(seed)
    z, R = g.normal(size=(S, K)), g.uniform(size=(K,) * S)
    c, cn = brute(z, R)
    assert np.allclose(conditional_success(z, R), c)
    if S > 0 and K > 1:
        assert np.allclose(task_advantage_ratio(z, R), c / cn)


@pytest.mark.parametrize("S,K,seed", [(2, 3, 0), (3, 2, 1), (3, 4, 2)])
def test_expected_gradient_is_autograd_of_the_objective(S, K, seed):
    g = np.random.default_rng(seed)
    z, R = g.normal(size=(S, K)), g.uniform(size=(K,) * S)
    zt = torch.tensor(z, requires_grad=True)
    pi = torch.softmax(zt, -1)
    joint = pi[0]
    for s in range(1, S):
        joint = joint[..., None] * pi[s]
    (joint * torch.tensor(R)).sum().backward()
    assert np.allclose(expected_policy_gradient(z, R), zt.grad.numpy(), atol=1e-12)
    assert success(z, R) == pytest.approx(float((joint * torch.tensor(R)).sum().detach()))


def test_gradient_sign_is_sign_of_rho_minus_one_and_monte_carlo_agrees():
    g = np.random.default_rng(5)
    z, R = g.normal(size=(3, 3)), (g.random((3, 3, 3)) < 0.5).astype(float)
    ex = expected_policy_gradient(z, R)
    assert np.array_equal(np.sign(ex), np.sign(task_advantage_ratio(z, R) - 1))
    a = sample_actions(z, 200_000, g)
    mc = reinforce_gradient(z, a, table_rewards(R, a, g))
    assert np.linalg.norm(mc - ex) / np.linalg.norm(ex) < 0.05


def test_ratio_edge_cases_inf_and_nan():
    z = chain_logits(3, 0.7)
    rho = task_advantage_ratio(z, chain_table(3))
    assert np.isinf(rho[:, 0]).all() and (rho[:, 1] == 0).all()        # only the denominator is 0 → inf
    rho0 = task_advantage_ratio(z, np.zeros((2, 2, 2)))
    assert np.isnan(rho0).all()                                         # 0/0 stays undefined


def test_zero_advantage_step_has_zero_gradient():
    R = np.array([[1.0, 1.0], [0.0, 0.0]])                               # step 2 irrelevant on train
    z = np.random.default_rng(0).normal(size=(2, 2))
    assert np.allclose(task_advantage_ratio(z, R)[1], 1.0)
    assert np.abs(expected_policy_gradient(z, R)[1]).max() < 1e-15


def test_factorized_forms_match_the_full_table():
    g = np.random.default_rng(3)
    z, r = g.normal(size=(4, 3)), g.uniform(size=(4, 3))
    R = np.einsum("i,j,k,l->ijkl", *r)
    assert np.allclose(factorized_conditional_success(z, r), conditional_success(z, R))
    assert np.allclose(factorized_policy_gradient(z, r), expected_policy_gradient(z, R))
    z2 = chain_logits(40, 0.9)                                           # large S: closed form of Eq. (8)
    e0 = np.tile([1.0, 0.0], (40, 1))
    assert factorized_policy_gradient(z2, e0)[0, 0] == pytest.approx(0.9 * 0.1 * 0.9 ** 39)


def test_shortcut_closed_forms_and_ode():
    Rtr, Rte = shortcut_tables()
    for p in (0.1, 0.3, 0.5, 0.8):
        z = shortcut_logits(p)
        assert task_advantage_ratio(z, Rtr)[0, 0] == pytest.approx(2 * p / (1 - p))     # Eq. (10)
        assert success(z, Rte) == pytest.approx(p * p)
        h = 1e-6
        p1 = softmax(z + h * expected_policy_gradient(z, Rtr))[0, 0]
        assert (p1 - p) / h == pytest.approx(float(shortcut_ode(p)), abs=1e-5)          # Eq. (11)
    assert np.sign(shortcut_ode(0.3)) == -1 and np.sign(shortcut_ode(0.34)) == 1


def test_exact_training_crosses_at_one_third():
    Rtr, Rte = shortcut_tables()
    step = lambda z, t: expected_policy_gradient(z, Rtr)
    hi, _ = train_policy(shortcut_logits(0.36), step, lr=1.0, iters=2000)
    lo, _ = train_policy(shortcut_logits(0.30), step, lr=1.0, iters=2000)
    assert success(hi, Rte) > 0.95 and success(lo, Rte) < 0.05


def test_grpo_advantages_and_kl_gradient():
    r = np.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    A = grpo_advantages(r)
    assert np.allclose(A[0], (r[0] - 0.25) / (np.std(r[0]) + 1e-6)) and np.allclose(A[1], 0)
    z, b = np.array([[0.2, -0.3, 1.0]]), np.log(np.array([[0.5, 0.25, 0.25]]))
    zt = torch.tensor(z, requires_grad=True)
    p = torch.softmax(zt, -1)
    (p * (torch.log(p) - torch.tensor(b))).sum().backward()
    assert np.allclose(kl_gradient(z, b), zt.grad.numpy())


def test_sampling_frequencies_and_bad_input():
    g = np.random.default_rng(1)
    z = np.log(np.array([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25]]))
    a = sample_actions(z, 100_000, g)
    freq = np.stack([np.bincount(a[:, s], minlength=3) / len(a) for s in range(2)])
    assert np.abs(freq - softmax(z)).max() < 0.01
    with pytest.raises(ValueError, match="shape"):
        conditional_success(z, np.ones((3, 3, 3)))
    with pytest.raises(ValueError, match="0 < p0 < 1"):
        shortcut_logits(1.5)


def test_transformer_policy_is_a_distribution_with_the_base_prior():
    torch.manual_seed(0)
    pol = TransformerPolicy(shortcut_logits(0.4))
    assert pol.table_success(np.ones((3, 3))) == pytest.approx(1.0, abs=1e-5)
    a = pol.sample(4000, torch.Generator().manual_seed(0))
    assert abs((a[:, 0] == 0).float().mean().item() - 0.4) < 0.05
