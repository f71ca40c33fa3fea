"""paper_suite.applications.fourier_contours against references that share no code with it: loops over the series in
NumPy, the shoelace formula, matplotlib's crossing-number point-in-polygon test, skimage's polygon fill, scipy's
distances, scikit-learn's F1 score and finite differences."""
import math

import numpy as np
import pytest
import torch
from matplotlib.path import Path as MplPath
from scipy.spatial.distance import cdist, directed_hausdorff
from skimage.draw import polygon as draw_polygon
from sklearn.metrics import f1_score

from paper_suite.applications.fourier_contours import (FourierContourNet, batch_chamfer, cardiac_phantoms,
                                                       dice_score, efd_area, efd_fit, efd_points, ejection_fraction,
                                                       hd95, lv_volumes, mask_contours, polar_area, polar_points,
                                                       polygon_area, rot90_contours, rotate_coefficients,
                                                       shift_start, soft_rasterize, stack_volume, winding_number)


def rand_coeffs(*batch, K=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    C = torch.randn(*batch, K, 4, generator=g, dtype=torch.float64) * 0.3 / torch.arange(1, K + 1)[:, None] ** 2
    C[..., 0, :] += torch.tensor([3.0, 0.0, 0.0, 3.0], dtype=torch.float64)
    return C


def np_series(C, c0, n):
    """x(t), y(t) of Eq. (1) by an explicit loop."""
    C, c0 = np.asarray(C), np.asarray(c0)
    out = np.zeros((n, 2))
    for j in range(n):
        t = 2 * np.pi * j / n
        x, y = c0
        for k in range(1, len(C) + 1):
            a, b, c, d = C[k - 1]
            x += a * np.cos(k * t) + b * np.sin(k * t)
            y += c * np.cos(k * t) + d * np.sin(k * t)
        out[j] = x, y
    return out


def np_shoelace(p):
    x, y = p[:, 0], p[:, 1]
    return 0.5 * np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y)


def test_efd_points_matches_a_loop_with_batch_dims():
    C = rand_coeffs(2, 3)
    c0 = torch.randn(2, 3, 2, dtype=torch.float64)
    pts = efd_points(C, c0, 17)
    assert pts.shape == (2, 3, 17, 2)
    for i in range(2):
        for j in range(3):
            np.testing.assert_allclose(pts[i, j].numpy(), np_series(C[i, j], c0[i, j], 17), atol=1e-12)


def test_efd_area_equals_dense_shoelace_and_sign_is_orientation():
    C = rand_coeffs(4, seed=1)
    for i in range(4):
        ref = np_shoelace(np_series(C[i], [0.0, 0.0], 20000))
        assert math.isclose(efd_area(C[i]).item(), ref, rel_tol=1e-6)
    # counter-clockwise circle: positive; the same circle travelled backwards: negative
    ccw = torch.tensor([[2.0, 0.0, 0.0, 2.0]], dtype=torch.float64)
    cw = torch.tensor([[2.0, 0.0, 0.0, -2.0]], dtype=torch.float64)
    assert math.isclose(efd_area(ccw).item(), 4 * math.pi) and math.isclose(efd_area(cw).item(), -4 * math.pi)
    assert efd_area(C).shape == (4,)


def test_efd_area_gradient_is_the_derivative_of_eq2():
    C = rand_coeffs(K=3, seed=2).requires_grad_()
    efd_area(C).backward()
    k = torch.arange(1, 4, dtype=torch.float64)
    a, b, c, d = C.detach().unbind(-1)
    expected = torch.stack([math.pi * k * d, -math.pi * k * c, -math.pi * k * b, math.pi * k * a], -1)
    torch.testing.assert_close(C.grad, expected)
    assert torch.autograd.gradcheck(lambda x: efd_area(x), (rand_coeffs(K=3, seed=3).requires_grad_(),))


def test_polar_area_and_points():
    R = torch.tensor([4.0, 0.3, -0.2, 0.5, 0.1], dtype=torch.float64)
    p = polar_points(R, torch.tensor([1.0, -2.0], dtype=torch.float64), 20000).numpy()
    assert math.isclose(polar_area(R).item(), np_shoelace(p), rel_tol=1e-6)
    assert math.isclose(polygon_area(torch.from_numpy(p)).item(), np_shoelace(p), rel_tol=1e-12)


def test_rotate_coefficients_rotates_points_about_the_centre():
    C = rand_coeffs(3, seed=4)
    c0 = torch.tensor([[1.0, 2.0], [0.0, 0.0], [-3.0, 1.0]], dtype=torch.float64)
    ang = torch.tensor([0.3, -1.2, 2.5], dtype=torch.float64)
    got = efd_points(rotate_coefficients(C, ang), c0, 32).numpy()
    for i in range(3):
        t = float(ang[i])
        R = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
        ref = (np_series(C[i], [0, 0], 32)) @ R.T + c0[i].numpy()
        np.testing.assert_allclose(got[i], ref, atol=1e-12)
    # scalar angle; area preserved
    torch.testing.assert_close(efd_area(rotate_coefficients(C, 0.7)), efd_area(C))


def test_shift_start_is_a_cyclic_roll():
    C = rand_coeffs(seed=5)
    c0 = torch.zeros(2, dtype=torch.float64)
    got = efd_points(shift_start(C, 2 * math.pi * 5 / 40), c0, 40).numpy()
    np.testing.assert_allclose(got, np.roll(np_series(C, [0, 0], 40), -5, axis=0), atol=1e-12)


def star(n=48, seed=0, cx=15.3, cy=14.6):
    rng = np.random.default_rng(seed)
    phi = np.linspace(0, 2 * np.pi, n, endpoint=False)
    r = 8 * (1 + 0.25 * np.cos(3 * phi + rng.uniform(0, 6)) + 0.1 * np.sin(5 * phi))
    return np.stack([cx + r * np.cos(phi), cy + r * np.sin(phi)], 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_soft_rasterize_hard_limit_matches_matplotlib_both_orientations(seed):
    p = star(seed=seed)
    rr, cc = np.mgrid[0:30, 0:33]
    inside = MplPath(p).contains_points(np.stack([cc.ravel(), rr.ravel()], 1)).reshape(30, 33)
    pts = torch.from_numpy(np.stack([p, p[::-1]]))                       # batch: both orientations
    m = soft_rasterize(pts, 30, 33, 1e4)
    assert m.shape == (2, 30, 33)
    for i in range(2):
        np.testing.assert_array_equal(m[i].numpy() > 0.5, inside)
    w = winding_number(pts, 30, 33)
    assert set(np.round(w[0].numpy(), 6).ravel()) <= {0.0, 1.0} and set(np.round(w[1].numpy(), 6).ravel()) <= {0.0, -1.0}


def test_soft_mask_area_tends_to_the_skimage_pixel_count():
    p = star(seed=3)
    rr, cc = draw_polygon(p[:, 1], p[:, 0], (32, 32))
    count = len(rr)
    errs = [abs(soft_rasterize(torch.from_numpy(p), 32, 32, k).sum().item() - count) for k in (2, 8, 32, 1000)]
    assert all(a >= b for a, b in zip(errs, errs[1:])) and errs[-1] <= 2       # boundary pixels may differ
    assert abs(count - abs(np_shoelace(p))) < 0.05 * count


def test_soft_rasterize_is_differentiable():
    p = torch.from_numpy(star(seed=4)).requires_grad_()
    soft_rasterize(p, 32, 32, 8.0).sum().backward()
    assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
    # growing the polygon about its centre grows the soft area
    c = p.detach().mean(0)
    a1 = soft_rasterize(c + 1.05 * (p.detach() - c), 32, 32, 8.0).sum()
    assert a1 > soft_rasterize(p.detach(), 32, 32, 8.0).sum()


def test_bad_inputs_give_clear_errors():
    with pytest.raises(ValueError, match="coeffs"):
        efd_points(torch.zeros(3, 3), torch.zeros(2), 8)
    with pytest.raises(ValueError, match="points"):
        soft_rasterize(torch.zeros(2, 2), 4, 4, 1.0)
    with pytest.raises(ValueError, match="head"):
        FourierContourNet(32, 8, 4, head="mask")


def test_efd_fit_round_trip():
    C = rand_coeffs(K=3, seed=6)
    C[0] = torch.tensor([3.0, 0.0, 0.0, 3.0], dtype=torch.float64)               # a circle: uniform in arc length
    C[1:] = 0
    p = np_series(C, [2.0, -1.0], 300)
    cf, cen = efd_fit(p, 3)
    np.testing.assert_allclose(cf, C.numpy(), atol=1e-3)
    np.testing.assert_allclose(cen, [2.0, -1.0], atol=1e-9)


def test_volume_and_ef():
    A = torch.tensor([[10.0, -20.0, 5.0]])
    assert stack_volume(A, 2.0).item() == 70.0
    assert math.isclose(ejection_fraction(torch.tensor(120.0), torch.tensor(48.0)).item(), 0.6, rel_tol=1e-6)
    # lv_volumes: circles of radius 3 (cavity) in radius 5 (epicardium) on 4 slices
    co = torch.zeros(1, 4, 3, 2, 4, dtype=torch.float64)
    co[..., 0, 0, 0] = co[..., 0, 0, 3] = 3.0
    co[..., 1, 0, 0] = co[..., 1, 0, 3] = 5.0
    v = lv_volumes({"coeffs": co, "center": torch.zeros(1, 4, 3, 2)}, 0.5)
    np.testing.assert_allclose(v.numpy(), [[4 * 9 * math.pi * 0.5, 4 * 16 * math.pi * 0.5]])


def test_dice_and_hd95_against_sklearn_and_scipy():
    rng = np.random.default_rng(0)
    a = rng.random((3, 12, 12)) < 0.3
    b = rng.random((3, 12, 12)) < 0.3
    assert math.isclose(dice_score(a, b), f1_score(b.ravel(), a.ravel()))
    m1 = np.zeros((2, 20, 20), bool); m1[:, 4:12, 5:15] = True
    m2 = np.zeros((2, 20, 20), bool); m2[:, 6:15, 3:13] = True
    sp = (10.0, 1.5, 1.5)
    from scipy.ndimage import binary_erosion
    st = np.zeros((3, 3, 3), bool); st[1] = [[0, 1, 0], [1, 1, 1], [0, 1, 0]]
    pa = np.argwhere(m1 & ~binary_erosion(m1, st, border_value=0)) * sp
    pb = np.argwhere(m2 & ~binary_erosion(m2, st, border_value=0)) * sp
    D = cdist(pa, pb)
    ref = max(np.percentile(D.min(1), 95), np.percentile(D.min(0), 95))
    assert math.isclose(hd95(m1, m2, sp), ref, rel_tol=1e-9)
    assert hd95(m1, m2, sp) <= max(directed_hausdorff(pa, pb)[0], directed_hausdorff(pb, pa)[0]) + 1e-9
    assert hd95(m1, m1, sp) == 0.0 and hd95(m1, np.zeros_like(m1), sp) > 0


def test_batch_chamfer_against_cdist():
    rng = np.random.default_rng(1)
    P, Q = rng.random((2, 7, 2)), rng.random((2, 9, 2))
    got = batch_chamfer(torch.from_numpy(P), torch.from_numpy(Q)).numpy()
    for i in range(2):
        D = cdist(P[i], Q[i])
        assert math.isclose(got[i], D.min(1).mean() + D.min(0).mean(), rel_tol=1e-12)


def test_phantoms_are_consistent_and_seeded():
    ph = cardiac_phantoms(2, 32, 6, seed=3)
    assert ph["images"].shape == (2, 2, 6, 32, 32) and ph["labels"].max() == 3
    vox = ph["voxel_ml"]
    np.testing.assert_allclose(ph["volumes"][..., 0], (ph["labels"] == 1).sum((-3, -2, -1)) * vox)
    assert (ph["volumes"][:, 1, 0] < ph["volumes"][:, 0, 0]).all()              # ES smaller than ED
    np.testing.assert_array_equal(ph["images"], cardiac_phantoms(2, 32, 6, seed=3)["images"])
    # the mask is skimage's fill of the endocardial polygon
    poly = ph["polygons"][0, 0, 2, 0]
    rr, cc = draw_polygon(poly[:, 1], poly[:, 0], (32, 32))
    ref = np.zeros((32, 32), bool); ref[rr, cc] = True
    np.testing.assert_array_equal(ph["labels"][0, 0, 2] == 1, ref)


def test_mask_contours_trace_the_masks():
    ph = cardiac_phantoms(1, 32, 4, seed=5)
    pts, ok = mask_contours(ph["labels"][0, 0], 64)
    assert pts.shape == (4, 3, 64, 2) and ok[:, :2].all()
    for s in range(4):
        filled = soft_rasterize(torch.from_numpy(pts[s, 0]), 32, 32, 1e4).numpy() > 0.5
        assert dice_score(filled, ph["labels"][0, 0, s] == 1) > 0.9


def test_rot90_contours_matches_torch_rot90():
    p = torch.from_numpy(star(seed=6))
    a = soft_rasterize(rot90_contours(p, 32), 32, 32, 1e4) > 0.5
    b = torch.rot90(soft_rasterize(p, 32, 32, 1e4) > 0.5, 1, (-2, -1))
    assert torch.equal(a, b)


@pytest.mark.parametrize("kw", [dict(), dict(cross_slice=False), dict(head="polar")])
def test_model_shapes_and_slice_mixing(kw):
    torch.manual_seed(0)
    net = FourierContourNet(32, 6, 4, 32, **kw).eval()
    with torch.no_grad():
        net.out.normal_()                   # the head starts at zero (circles); give it weights to see through it
    x = torch.randn(2, 6, 32, 32)
    out = net(x)
    key = "radii" if kw.get("head") == "polar" else "coeffs"
    assert out[key].shape[:3] == (2, 6, 3) and out["center"].shape == (2, 6, 3, 2)
    assert net.n_out == (2 * 4 + 3 if key == "radii" else 4 * 4 + 2)
    # cross-slice attention: changing one slice changes the others' outputs; without it, it does not
    x2 = x.clone(); x2[:, 0] += 1.0
    changed = (net(x2)[key][:, 1:] - out[key][:, 1:]).abs().max().item() > 1e-6
    assert changed == kw.get("cross_slice", True)
