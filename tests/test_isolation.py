"""The IsolationForest port (`loophound.detect.isolation`) gives scikit-learn's scores bit for
bit: scikit-learn is the reference here, at test time only; a scan never imports it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from loophound.detect import isolation

sklearn_ensemble = pytest.importorskip("sklearn.ensemble")

ROOT = Path(__file__).resolve().parents[1]


def sklearn_scores(X: np.ndarray, n_estimators: int, random_state: int) -> np.ndarray:
    forest = sklearn_ensemble.IsolationForest(n_estimators=n_estimators,
                                              random_state=random_state,
                                              contamination="auto", n_jobs=1)
    with np.errstate(over="ignore"):  # beyond float32's range: ±inf, here as in the port
        return -forest.fit(X).score_samples(X)


def same(X: np.ndarray, n_estimators: int = 100, random_state: int = 0) -> bool:
    ours = isolation.anomaly_scores(X, n_estimators, random_state)
    theirs = sklearn_scores(X, n_estimators, random_state)
    return ours.dtype == theirs.dtype and np.array_equal(ours, theirs)


def matrices() -> list[tuple[str, np.ndarray]]:
    """Windows-like matrices and the degenerate ones."""
    rng = np.random.default_rng(16)
    out = []
    for n in (1, 2, 3, 4, 7, 20, 95, 256, 257, 258, 300, 700):
        X = rng.lognormal(size=(n, 7))
        X[: max(1, n // 50)] *= 40  # a few outliers
        out.append(("lognormal", X))
        out.append(("duplicated rows", X[rng.integers(0, max(1, n // 4), n)]))
        constant = rng.normal(size=(n, 7))
        constant[:, [0, 3, 6]] = 2.5
        out.append(("constant columns", constant))
        out.append(("integers", rng.integers(0, 3, (n, 7)).astype(float)))
    for n in (1, 2, 5, 40, 300):
        out.append(("identical rows", np.tile(rng.normal(size=7), (n, 1))))
        out.append(("magnitudes", rng.normal(size=(n, 7)) * 10.0 ** rng.integers(-40, 40, 7)))
        # beyond float32: ±inf once cast, as scikit-learn casts them
        out.append(("huge", rng.normal(size=(n, 3)) * np.array([1e300, 1.0, 1e-300])))
    out.append(("one column", rng.normal(size=(50, 1))))
    # values one float32 step apart: constant or not by FEATURE_THRESHOLD added in float32
    step = np.float32(1.0) + np.finfo(np.float32).eps
    out.append(("one float32 step", np.array([[1.0, 0.0], [float(step), 1.0], [1.0, 2.0]] * 9)))
    return out


@pytest.mark.parametrize("name,X", matrices(), ids=lambda v: v if isinstance(v, str) else None)
def test_the_scores_are_scikit_learns_bit_for_bit(name, X):
    for n_estimators, random_state in ((100, 0), (7, 3), (1, 2**31 - 2)):
        assert same(X, n_estimators, random_state), (name, X.shape, n_estimators, random_state)


def test_many_rows_draw_their_samples_as_scikit_learn_does():
    """Past 100 × 256 rows the samples are drawn one by one (tracking selection), between
    256 and 258 by reservoir, in between by a permutation (matrices() covers those)."""
    X = np.random.default_rng(3).normal(size=(26_000, 2))
    assert same(X, n_estimators=3, random_state=5)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(X=hnp.arrays(np.float64, st.tuples(st.integers(1, 80), st.integers(1, 8)),
                    elements=st.one_of(st.floats(-1e6, 1e6, allow_nan=False),
                                       st.sampled_from([0.0, -0.0, 1.0, 1e-30, 3e38, -1e39]))),
       n_estimators=st.integers(1, 30), random_state=st.integers(0, 2**32 - 1))
def test_any_matrix_and_seed_scores_as_scikit_learn(X, n_estimators, random_state):
    assert same(X, n_estimators, random_state)


def test_unusual_actor_scores_with_the_port():
    from loophound.detect import unusual_actor as ua

    X = np.random.default_rng(7).lognormal(size=(300, len(ua.FEATURES)))
    X[:5] *= 40  # a few outliers
    scores = ua.anomaly_scores(X, ua.Params())
    assert np.array_equal(scores, sklearn_scores(X, 100, 0))
    assert scores[:5].min() > np.median(scores)


def test_what_the_port_does_not_score_is_refused():
    with pytest.raises(ValueError, match="NaN"):
        isolation.anomaly_scores(np.array([[1.0, np.nan], [2.0, 3.0]]))
    with pytest.raises(ValueError, match="2-d"):
        isolation.anomaly_scores(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="n_estimators"):
        isolation.anomaly_scores(np.zeros((4, 3)), n_estimators=0)


SCAN_IMPORTS = """
import json, sys
from loophound.scan import scan_store
from loophound.store import Store
found = scan_store(Store(sys.argv[1]), save=False).document["findings"]
json.dump({"detectors": sorted({f["detector"] for f in found}), "modules": sorted(sys.modules)},
          open(sys.argv[2], "w"))
"""


def test_a_scan_that_scores_windows_does_not_import_scikit_learn(tmp_path):
    from loophound.ingest import ingest
    from loophound.store import Store
    from loophound.synth import write_bproxy_log

    write_bproxy_log(tmp_path / "logs", seed=7, incident=True)
    ingest([str(tmp_path / "logs")], Store(tmp_path / "store"))
    listing = tmp_path / "scan.json"
    done = subprocess.run([sys.executable, "-c", SCAN_IMPORTS, str(tmp_path / "store"),
                           str(listing)], capture_output=True, text=True, timeout=300,
                          env=os.environ | {"PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr
    found = json.loads(listing.read_text())
    assert "unusual_actor" in found["detectors"]  # the forest was fitted and flagged
    assert not [m for m in found["modules"] if m == "sklearn" or m.startswith("sklearn.")]


@pytest.mark.parametrize("targets", ["two values", "tenths", "near ties", "rounding",
                                     "uniform"])
def test_a_tree_stops_where_scikit_learns_criterion_stops_it(targets):
    """The forest's targets are uniform draws, so a node whose targets are equal (impurity
    <= EPSILON) or a split that improves nothing (improvement + EPSILON < 0) is rare there;
    with chosen targets it is common, and whether a node stops depends on how the criterion
    rounds its sums: each tree must still be scikit-learn's, node for node."""
    from sklearn.tree import ExtraTreeRegressor

    rng = np.random.default_rng(9)
    for seed in range(25):
        n = int(rng.integers(2, 120))
        X = rng.normal(size=(n, 4))
        X[:, 2] = 1.0  # a constant feature
        y = {"two values": rng.integers(0, 2, n) * 1.0,
             "tenths": rng.integers(1, 4, n) / 10.0,
             "near ties": 0.3 + rng.integers(0, 3, n) * 1e-9,
             # variances near the sums' rounding: it decides where a tree stops, so the
             # order the criterion adds the targets in (the partition's order) matters
             "rounding": 1.0 + rng.integers(0, 3, n) * 1e-7,
             "uniform": rng.uniform(size=n)}[targets]
        weight = (rng.uniform(size=n) < 0.7).astype(np.int64)
        weight[0] = 1
        max_depth = int(rng.integers(1, 9))
        tree = ExtraTreeRegressor(max_features=1, splitter="random", random_state=seed,
                                  max_depth=max_depth).fit(X, y, sample_weight=weight).tree_
        rand_state = int(np.random.RandomState(seed).randint(0, isolation.RAND_R_MAX))
        X32 = X.astype(np.float32)
        ours = isolation._TreeBuilder([X32[:, f].astype(float).tolist() for f in range(4)],
                                      y.tolist(), np.flatnonzero(weight).tolist(), max_depth,
                                      rand_state).build()
        assert ours.n_node_samples == tree.n_node_samples.tolist(), (targets, seed)
        assert ours.feature == tree.feature.tolist() and ours.threshold == tree.threshold.tolist()
        assert ours.left == tree.children_left.tolist()
        assert ours.right == tree.children_right.tolist()
