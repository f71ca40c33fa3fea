"""Unit tests for paper_suite.algorithms.efficient_bench against references that share none of its code:
the `mrmr-selection` package, a naive mRMR loop, scikit-learn (Ridge, KernelRidge, KMeans, metrics,
mutual_info_score), pandas' qcut, brute-force counting, SciPy optimisation and statistics, autograd of the MAP
objective, and closed-form identities."""
import numpy as np
import pandas as pd
import pytest
import torch
from scipy import optimize, stats
from scipy.spatial.distance import pdist

from paper_suite.algorithms.efficient_bench import (
    PREDICTORS, SELECTORS, discrete_mi, discretize, fit_irt, gaussian_mi, irt_abilities, jaccard, kmeans_anchors, mrmr_select,
    predict_scores, score_metrics, select_items, simulate_mirt, sklearn_zoo, split_models)


@pytest.fixture(scope="module")
def board():
    return simulate_mirt(120, 150, metric="binary", seed=0).Y


# -- data -----------------------------------------------------------------------------------------
def test_simulate_mirt_shapes_values_seed():
    b = simulate_mirt(30, 50, seed=3)
    c = simulate_mirt(30, 50, metric="continuous", seed=3)
    assert b.Y.shape == c.Y.shape == (30, 50) and b.family.shape == (30,)
    assert set(np.unique(b.Y)) <= {0.0, 1.0} and ((c.Y > 0) & (c.Y < 1)).all()
    assert np.array_equal(b.Y, simulate_mirt(30, 50, seed=3).Y)
    assert not np.array_equal(b.Y, simulate_mirt(30, 50, seed=4).Y)
    with pytest.raises(ValueError):
        simulate_mirt(5, 5, metric="ordinal")


def test_simulate_mirt_scores_share_abilities():
    b = simulate_mirt(200, 300, seed=1, n_families=4)
    # families differ in ability: a one-way ANOVA on full scores across families is decisive
    groups = [b.Y[b.family == f].mean(1) for f in np.unique(b.family)]
    assert stats.f_oneway(*groups).pvalue < 1e-6


def test_sklearn_zoo_binary_consistent_with_probabilities():
    zb, zc = sklearn_zoo(7, 60, seed=0)
    assert zb.Y.shape == zc.Y.shape == (7, 60)
    assert set(np.unique(zb.Y)) <= {0.0, 1.0} and ((zc.Y >= 0) & (zc.Y <= 1)).all()
    # a true-class probability above 1/2 is the arg-max, so the answer is correct
    assert (zb.Y[zc.Y > 0.5] == 1).all()
    assert zb.Y.mean(1).max() > 0.8                                      # the zoo holds good classifiers


# -- mRMR -----------------------------------------------------------------------------------------
def naive_mrmr_mid(X, y, k):
    """mRMR with Gaussian MI, Eqs. (13)-(14), written as plainly as possible with np.corrcoef."""
    C = np.corrcoef(np.column_stack([X, y]), rowvar=False)
    mi = lambda r: -0.5 * np.log(1 - r * r)
    rel = mi(C[:-1, -1])
    S = []
    for _ in range(k):
        best, best_score = None, -np.inf
        for j in range(X.shape[1]):
            if j in S:
                continue
            score = rel[j] - (np.mean([mi(C[j, i]) for i in S]) if S else 0.0)
            if score > best_score:
                best, best_score = j, score
        S.append(best)
    return S


def test_mrmr_mid_matches_naive_loop():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 30)) + rng.normal(size=(150, 1))
    y = X[:, :4] @ np.array([1.0, 0.5, -0.7, 0.3]) + rng.normal(size=150)
    assert list(mrmr_select(X, y, 8, "mid")) == naive_mrmr_mid(X, y, 8)


def test_mrmr_fcq_matches_mrmr_selection_package():
    from mrmr import mrmr_regression
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 40)) + rng.normal(size=(200, 1))
    y = X[:, :5].sum(1) + rng.normal(size=200)
    ref = mrmr_regression(pd.DataFrame(X), pd.Series(y), K=12, show_progress=False, n_jobs=1)
    assert list(mrmr_select(X, y, 12, "fcq")) == list(ref)


def test_mrmr_skips_constant_and_duplicate_items():
    rng = np.random.default_rng(2)
    x = rng.normal(size=100)
    X = np.column_stack([np.ones(100), x, x, rng.normal(size=(100, 5))])
    sel = mrmr_select(X, x + 0.01 * rng.normal(size=100), 3, "mid")
    assert sel[0] in (1, 2) and 0 not in sel and not {1, 2} <= set(sel.tolist())
    assert len(set(mrmr_select(X, x, 8, "mid"))) == 8                    # falls back to the rest when needed


def test_gaussian_mi_closed_form():
    assert gaussian_mi(0.0) == 0.0
    assert gaussian_mi(0.6) == pytest.approx(-0.5 * np.log(0.64))
    assert np.isfinite(gaussian_mi(1.0))


def brute_force_mi(u, v):
    """Plug-in MI (nats) of two code sequences by counting pairs in plain Python, Eq. (14')."""
    n = len(u)
    joint, pu, pv = {}, {}, {}
    for a, b in zip(u.tolist(), v.tolist()):
        joint[(a, b)] = joint.get((a, b), 0) + 1
        pu[a] = pu.get(a, 0) + 1
        pv[b] = pv.get(b, 0) + 1
    return sum(c / n * np.log(n * c / (pu[a] * pv[b])) for (a, b), c in joint.items())


def test_discrete_mi_matches_sklearn_and_counting():
    from sklearn.metrics import mutual_info_score
    rng = np.random.default_rng(5)
    cx = rng.integers(0, 3, size=(90, 7))
    cx[:, 1] = (cx[:, 0] + rng.integers(0, 2, 90)) % 3                  # a dependent column
    cy = (cx[:, 0] + (rng.random(90) < 0.3)) % 4
    mi = discrete_mi(cx, cy)
    assert np.allclose(mi, [mutual_info_score(cx[:, q], cy) for q in range(7)])
    assert np.allclose(mi, [brute_force_mi(cx[:, q], cy) for q in range(7)])
    assert mi[0] > mi[2:].max()                                          # the dependent column has the most MI
    # MI of a variable with itself is its entropy; with a constant it is zero
    p = np.bincount(cx[:, 0]) / 90
    assert discrete_mi(cx[:, 0], cx[:, 0]) == pytest.approx(-(p * np.log(p)).sum())
    assert discrete_mi(cx[:, 0], np.zeros(90, dtype=int)) == 0.0


def test_discretize_binary_levels_and_equal_frequency_bins():
    rng = np.random.default_rng(6)
    b = (rng.random(200) < 0.8).astype(float)                            # 80 % ones: quantile edges coincide
    assert np.array_equal(discretize(b, 3), b.astype(int))
    X = rng.normal(size=(200, 4))
    codes = discretize(X, 3)
    for q in range(4):                                                   # pandas' equal-frequency bins
        assert np.array_equal(codes[:, q], pd.qcut(X[:, q], 3, labels=False))
    assert np.array_equal(discretize(X[:, 0], 5), pd.qcut(X[:, 0], 5, labels=False))
    t = np.repeat([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 10)                     # ties share a bin
    c = discretize(t, 3)
    assert all(len(set(c[t == v])) == 1 for v in np.unique(t)) and set(c.tolist()) == {0, 1, 2}


def naive_mrmr_disc(X, y, k, item_bins=3, score_bins=5):
    """mRMR with plug-in MI on pandas-qcut codes, Eqs. (13), (14'), by brute-force counting."""
    C = np.column_stack([pd.qcut(X[:, q], item_bins, labels=False) for q in range(X.shape[1])])
    cy = pd.qcut(y, score_bins, labels=False)
    rel = [brute_force_mi(C[:, j], cy) for j in range(X.shape[1])]
    S = []
    for _ in range(k):
        score = {j: rel[j] - (np.mean([brute_force_mi(C[:, j], C[:, i]) for i in S]) if S else 0.0)
                 for j in range(X.shape[1]) if j not in S}
        S.append(max(score, key=lambda j: (score[j], -j)))
    return S


def test_mrmr_disc_matches_naive_loop():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(200, 15)) + rng.normal(size=(200, 1))
    y = np.tanh(X[:, 0]) + X[:, 1] ** 2 + 0.5 * rng.normal(size=200)
    assert list(mrmr_select(X, y, 6, "disc")) == naive_mrmr_disc(X, y, 6)


def test_mrmr_disc_finds_a_nonlinear_item_the_gaussian_form_misses():
    rng = np.random.default_rng(8)
    n = 400
    X = rng.normal(size=(n, 20))
    y = X[:, 3] ** 2 + 0.2 * rng.normal(size=n)                           # no correlation, strong dependence
    assert mrmr_select(X, y, 1, "disc")[0] == 3
    assert abs(np.corrcoef(X[:, 3], y)[0, 1]) < 0.2


# -- selection ------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", SELECTORS)
def test_select_items_valid_subsets(board, method):
    idx = select_items(board, 15, method, seed=0)
    assert len(idx) == 15 and len(set(idx.tolist())) == 15
    assert idx.min() >= 0 and idx.max() < board.shape[1]


def test_select_items_seeding_and_errors(board):
    assert np.array_equal(select_items(board, 10, "random", seed=5), select_items(board, 10, "random", seed=5))
    assert np.array_equal(select_items(board, 10, "mrmr", seed=0), select_items(board, 10, "mrmr", seed=9))
    with pytest.raises(ValueError):
        select_items(board, 10, "clairvoyant")
    with pytest.raises(ValueError):
        select_items(board, 0, "random")


def test_kmeans_anchors_are_nearest_to_sklearn_centroids(board):
    from sklearn.cluster import KMeans
    F = board.T
    idx, w = kmeans_anchors(F, 12, seed=3)
    km = KMeans(n_clusters=12, n_init=1, random_state=3).fit(F)
    D = ((F[:, None, :] - km.cluster_centers_[None]) ** 2).sum(-1)
    assert np.allclose(D[idx, np.arange(12)], D.min(0))                  # each anchor is a nearest item
    assert np.allclose(w, np.bincount(km.labels_, minlength=12) / F.shape[0]) and w.sum() == pytest.approx(1)


# -- prediction -----------------------------------------------------------------------------------
def test_predict_mean_and_full_subset_identities(board):
    tr, te = board[:90], board[90:]
    idx = np.arange(0, 150, 5)
    assert np.allclose(predict_scores(tr, idx, te[:, idx], "mean"), te[:, idx].mean(1))
    full = np.arange(150)
    for method in ("mean", "weighted", "irt"):                           # k = Q: every estimator is exact
        assert np.allclose(predict_scores(tr, full, te, method), te.mean(1)), method


def test_predict_linear_is_sklearn_ridge(board):
    from sklearn.linear_model import Ridge
    tr, te = board[:90], board[90:]
    idx = np.arange(0, 150, 7)
    ours = predict_scores(tr, idx, te[:, idx], "linear", lams=[2.5])
    ref = Ridge(alpha=2.5).fit(tr[:, idx], tr.mean(1)).predict(te[:, idx])
    assert np.allclose(ours, ref)


def test_predict_krr_is_sklearn_kernel_ridge(board):
    from sklearn.kernel_ridge import KernelRidge
    tr, te = board[:90], board[90:]
    idx = np.arange(0, 150, 7)
    X, s = tr[:, idx], tr.mean(1)
    gamma = 1 / (2 * np.median(pdist(X)) ** 2)
    ref = KernelRidge(alpha=0.05, kernel="rbf", gamma=gamma).fit(X, s - s.mean()).predict(te[:, idx]) + s.mean()
    assert np.allclose(predict_scores(tr, idx, te[:, idx], "krr", lams=[0.05]), ref)


@pytest.mark.parametrize("method", PREDICTORS)
def test_predictors_beat_a_constant_on_random_subsets(board, method):
    tr, te = board[:90], board[90:]
    idx = np.random.default_rng(0).choice(150, 40, replace=False)
    pred = predict_scores(tr, idx, te[:, idx], method)
    assert pred.shape == (30,)
    assert np.abs(pred - te.mean(1)).mean() < np.abs(tr.mean() - te.mean(1)).mean()


def test_unknown_predictor_raises(board):
    with pytest.raises(ValueError):
        predict_scores(board[:50], [0, 1], board[50:, :2], "oracle")


# -- IRT ------------------------------------------------------------------------------------------
def map_objective(Y, theta, a, b, prior_b=0.1):
    """Eq. (9), written independently with torch autograd."""
    z = theta @ a.T - b
    ll = -torch.nn.functional.binary_cross_entropy_with_logits(z, Y, reduction="sum")
    return ll - 0.5 * (theta ** 2).sum() - 0.5 * (a ** 2).sum() - 0.5 * prior_b * (b ** 2).sum()


def test_fit_irt_reaches_a_stationary_point(board):
    Y = torch.as_tensor(board, dtype=torch.float64)
    irt = fit_irt(board, dim=2, sweeps=60, seed=0)
    params = [irt.theta.clone().requires_grad_(), irt.a.clone().requires_grad_(), irt.b.clone().requires_grad_()]
    map_objective(Y, *params).backward()
    g_fit = torch.cat([p.grad.ravel() for p in params]).norm()
    start = [torch.zeros_like(irt.theta).requires_grad_(), (0.1 * torch.ones_like(irt.a)).requires_grad_(),
             torch.zeros_like(irt.b).requires_grad_()]
    map_objective(Y, *start).backward()
    g_start = torch.cat([p.grad.ravel() for p in start]).norm()
    assert g_fit < 1e-2 * g_start


def test_irt_abilities_match_scipy_map(board):
    irt = fit_irt(board[:90], dim=2, seed=0)
    idx = np.arange(0, 150, 3)
    a, b = irt.a.numpy()[idx], irt.b.numpy()[idx]
    th = irt_abilities(irt, idx, board[90:95][:, idx], iters=40).numpy()
    for r in range(5):
        y = board[90 + r, idx]
        f = lambda t: -(y * (a @ t - b) - np.logaddexp(0, a @ t - b)).sum() + 0.5 * t @ t
        ref = optimize.minimize(f, np.zeros(2), method="BFGS", options={"gtol": 1e-10}).x
        assert np.allclose(th[r], ref, atol=1e-5)


# -- metrics --------------------------------------------------------------------------------------
def test_score_metrics_match_libraries():
    from sklearn.metrics import mean_absolute_error, mean_squared_error
    rng = np.random.default_rng(4)
    t, p = rng.random(25), rng.random(25)
    m = score_metrics(t, p)
    assert m["mae"] == pytest.approx(mean_absolute_error(t, p))
    assert m["rmse"] == pytest.approx(np.sqrt(mean_squared_error(t, p)))
    assert m["spearman"] == pytest.approx(stats.spearmanr(t, p)[0])
    assert m["kendall"] == pytest.approx(stats.kendalltau(t, p)[0])


def test_jaccard_and_split():
    assert jaccard([1, 2, 3], [1, 2, 3]) == 1.0 and jaccard([1], [2]) == 0.0 and jaccard([1, 2], [2, 3]) == 1 / 3
    tr, te = split_models(50, 0.7, seed=1)
    assert len(tr) == 35 and len(te) == 15 and sorted(np.r_[tr, te].tolist()) == list(range(50))
    assert np.array_equal(tr, split_models(50, 0.7, seed=1)[0])
