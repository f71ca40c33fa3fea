"""Unit tests for paper_suite.generative.info_dynamics against references that share none of its code:
matrix formulas and scipy's Gaussian entropies, Monte Carlo with exact posteriors (scipy.stats.truncnorm),
numerical integration, and skimage's Canny detector."""
import math

import numpy as np
import pytest
from scipy import integrate, stats

from paper_suite.generative.info_dynamics import (
    band_sign_features, between_class_top_variance, chained_densities, dct2, dct_bands, feature_information_density,
    gaussian_field, gaussian_mmse, gaussian_mutual_information, idct2, integrated_information, make_shapes,
    nested_envelope, peak_logsnr, power_law_spectrum, sign_band_density, sign_feature_density,
    sign_feature_information, single_envelope, standardize)

COV = np.array([[2.0, 0.6, 0.1], [0.6, 1.0, -0.2], [0.1, -0.2, 0.4]])


def test_gaussian_mmse_matches_the_matrix_formula():
    for snr in (0.0, 0.3, 5.0):
        ref = np.trace(COV @ np.linalg.inv(np.eye(3) + snr * COV))
        assert abs(gaussian_mmse(COV, snr) - ref) < 1e-12
    assert gaussian_mmse(COV, np.array([1.0, 2.0])).shape == (2,)


def test_gaussian_mutual_information_is_an_entropy_difference():
    # I(X; Z) = h(Z) - h(Z | X) with Z = sqrt(snr) X + N: scipy's Gaussian entropies
    for snr in (0.5, 4.0):
        hz = stats.multivariate_normal(cov=snr * COV + np.eye(3)).entropy()
        hn = stats.multivariate_normal(cov=np.eye(3)).entropy()
        assert abs(gaussian_mutual_information(COV, snr) - (hz - hn)) < 1e-10


def test_i_mmse_identity_by_quadrature():
    for snr in (0.7, 9.0):
        lhs = 0.5 * integrate.quad(lambda s: gaussian_mmse(COV, s), 0, snr, epsabs=1e-13)[0]
        assert abs(lhs - gaussian_mutual_information(COV, snr)) < 1e-10


def test_sign_information_by_monte_carlo():
    # I(sign X; Z) = log 2 - E h(P(X > 0 | Z)), with the posterior computed directly from Z
    rng = np.random.default_rng(0)
    lam, snr = 2.0, 0.8
    x = rng.normal(0, math.sqrt(lam), 400000)
    z = math.sqrt(snr) * x + rng.normal(size=x.size)
    m, v = math.sqrt(snr) * lam * z / (1 + snr * lam), lam / (1 + snr * lam)
    p = np.clip(stats.norm.sf(-m / math.sqrt(v)), 1e-300, 1 - 1e-16)
    h = -(p * np.log(p) + (1 - p) * np.log1p(-p))
    assert abs(sign_feature_information(math.log(snr * lam))[0] - (math.log(2) - h.mean())) < 3e-3


def test_sign_density_is_the_i_mmse_gap_by_monte_carlo():
    # ρ = ½ snr (mmse - mmse_F), with E[X | Z, sign X] the mean of a truncated normal (inverse Mills ratio)
    rng = np.random.default_rng(1)
    lam, snr = 1.0, math.exp(0.5)
    x = rng.normal(size=300000)
    z = math.sqrt(snr) * x + rng.normal(size=x.size)
    m, sd = math.sqrt(snr) * z / (1 + snr), math.sqrt(1 / (1 + snr))
    s = np.sign(x)
    al = -m / sd
    xF = np.where(s > 0, m + sd * stats.norm.pdf(al) / stats.norm.sf(al), m - sd * stats.norm.pdf(al) / stats.norm.cdf(al))
    gap = ((x - m) ** 2 - (x - xF) ** 2).mean()
    assert abs(0.5 * snr * gap - sign_feature_density(0.5)[0]) < 0.01


def test_sign_density_integrates_to_log2_and_is_the_derivative():
    g = np.linspace(-14, 16, 301)
    r = sign_feature_density(g)
    assert (r >= 0).all() and abs(integrated_information(r, g) - math.log(2)) < 2e-3
    assert np.abs(np.gradient(sign_feature_information(g), g) - r).max() < 2e-3
    # shape invariance: the band density of variances λ is the sum of shifted bumps
    assert np.allclose(sign_band_density([1.0, math.e], g[:5]), sign_feature_density(g[:5]) + sign_feature_density(g[:5] + 1))


def test_density_of_a_coordinate_feature_is_half_a_sigmoid():
    lam = np.array([0.7, 0.2]); g = np.linspace(-5, 5, 11)
    rho = feature_information_density(gaussian_mmse(lam, np.exp(g)), gaussian_mmse(lam[1:], np.exp(g)), g, space="x")
    assert np.allclose(rho, 0.5 * stats.logistic.cdf(g + np.log(0.7)))
    with pytest.raises(ValueError):
        feature_information_density([1.0], [0.5], space="y")


def test_chain_telescopes_and_envelope_bounds():
    rng = np.random.default_rng(2)
    e = np.sort(rng.uniform(0, 5, (4, 7)), axis=0)[::-1]
    links, joint = chained_densities(e)
    assert np.allclose(links.sum(0), joint) and links.shape == (3, 7) and (links >= 0).all()
    raw = rng.uniform(0, 5, (4, 7))
    env = nested_envelope(raw)
    assert (np.diff(env, axis=0) <= 0).all() and (env <= raw).all() and np.array_equal(env[0], raw[0])
    assert (single_envelope(raw[0], raw[1:]) <= raw[0]).all()


def test_peak_and_integral():
    g = np.linspace(-6, 6, 49)
    bump = stats.norm.pdf(g, 1.3, 1.0)
    assert abs(peak_logsnr(bump, g) - 1.3) < 0.05 and abs(integrated_information(bump, g) - 1) < 1e-3


def test_between_class_variance_closed_form():
    rng = np.random.default_rng(3)
    y = np.repeat([0, 1], 5000)
    z = rng.normal(size=(10000, 4)) * 0.01
    z[y == 1] += np.array([2.0, 0, 0, 0])
    assert abs(between_class_top_variance(z, y) - 0.25 * 4.0) < 1e-3      # π1 π2 ||μ1 − μ2||²
    s = standardize(z)
    assert abs(s.var(0).mean() - 1) < 1e-4 and np.abs(s.mean(0)).max() < 1e-5


def test_dct_is_orthonormal_and_bands_partition():
    n = 8
    k = np.arange(n)
    D = np.sqrt(2 / n) * np.cos(np.pi * (2 * k[None, :] + 1) * k[:, None] / (2 * n)); D[0] /= np.sqrt(2)
    x = np.random.default_rng(4).normal(size=(n, n))
    assert np.allclose(dct2(x), D @ x @ D.T) and np.allclose(idct2(dct2(x)), x)
    b = dct_bands(8, [2, 5, 8])
    assert b[0, 0] == 0 and b[7, 7] == 3 and set(np.unique(b)) == {0, 1, 2, 3}
    lam = power_law_spectrum(8, 2.0)
    assert abs(lam.mean() - 1) < 1e-12 and lam[0, 0] == lam.max()
    imgs, c = gaussian_field(20000, lam, 0)
    assert np.allclose(c.var(0), lam, rtol=0.1, atol=0.002)
    F = band_sign_features(c[:5], b)
    assert [f.shape[1] for f in F] == [int((b == i).sum()) for i in range(4)]


def test_shapes_features():
    from skimage.feature import canny
    sh = make_shapes(12, 16, 0)
    assert set(np.unique(sh["cls"])) <= {0, 1, 2} and sh["images"].min() >= 0 and sh["images"].max() <= 1
    assert (sh["images"][sh["mask"]] >= 0.1 - 1e-9).all()                         # cover ≥ ½ times texture ≥ 0.2
    for i in range(12):
        assert np.array_equal(sh["edges"][i], canny(sh["images"][i], sigma=0.7))
        assert (sh["images"][i][~sh["mask"][i]] <= 0.5 * 1.0 + 1e-9).all()    # outside the mask: under half cover
    assert make_shapes(3, 16, 5)["images"].tobytes() == make_shapes(3, 16, 5)["images"].tobytes()
