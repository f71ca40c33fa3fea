"""paper_suite.synthworld: determinism, typing and the 2-hop facts against networkx path enumeration."""
import networkx as nx
import numpy as np
import pytest

from paper_suite.synthworld import (Relation, compose, invented_names, make_world, passages, questions, to_networkx,
                                    verbalise, zipf_weights)

RELS = [Relation("born_in", "person", "city", "{h} was born in {t} .", "where was {h} born ?"),
        Relation("located_in", "city", "country", "{h} lies in {t} .", "where does {h} lie ?"),
        Relation("works_for", "person", "company", "{h} works for {t} .", "who employs {h} ?"),
        Relation("based_in", "company", "city", "{h} is based in {t} .", "where is {h} based ?")]
TYPES = {"person": 60, "city": 10, "country": 4, "company": 6}


def test_names_are_distinct_seeded_and_excluded():
    a = invented_names(2000, seed=3, exclude=["tova", "brisk"])
    assert len(set(a)) == 2000 and not {"tova", "brisk"} & set(a)
    assert a == invented_names(2000, seed=3, exclude=["tova", "brisk"])
    assert a[:50] != invented_names(50, seed=4)
    assert all(w.isalpha() and w.islower() for w in a)


def test_names_fail_clearly_when_too_many_are_asked():
    with pytest.raises(ValueError, match="distinct names"):
        invented_names(100_000, seed=0, syllables=(1, 1))
    small = invented_names(370, seed=0, syllables=(1, 1))      # 75 syllables x 6 endings = 450 exist
    assert len(set(small)) == 370


def test_zipf_weights():
    p = zipf_weights(5, 1.0)
    assert np.allclose(p, (1 / np.arange(1, 6)) / (1 / np.arange(1, 6)).sum())
    assert np.allclose(zipf_weights(4, 0.0), 0.25)


def test_world_types_fanout_and_determinism():
    w = make_world(TYPES, RELS, seed=1, fanout={"works_for": 2}, skew=1.5)
    assert all(len(v) == TYPES[k] for k, v in w.entities.items())
    assert len({e for v in w.entities.values() for e in v}) == sum(TYPES.values())
    for h, r, t in w.triples:
        assert w.type_of(h) == w.relations[r].head and w.type_of(t) == w.relations[r].tail
    assert all(len(set(w.tails(p, "works_for"))) == 2 for p in w.entities["person"])
    assert make_world(TYPES, RELS, seed=1, fanout={"works_for": 2}, skew=1.5).triples == w.triples
    assert make_world(TYPES, RELS, seed=2, fanout={"works_for": 2}, skew=1.5).triples != w.triples


def test_skew_makes_some_tails_popular():
    w0 = make_world({"person": 2000, "city": 20}, RELS[:1], seed=0, skew=0.0)
    w2 = make_world({"person": 2000, "city": 20}, RELS[:1], seed=0, skew=2.0)
    top = lambda w: max(np.unique([t for _, _, t in w.facts("born_in")], return_counts=True)[1]) / 2000
    assert top(w0) < 0.1 < 0.4 < top(w2)


def test_bad_relation_types_and_fanout_raise():
    with pytest.raises(ValueError, match="types are"):
        make_world({"person": 3}, RELS[:1], seed=0)
    with pytest.raises(ValueError, match="tails per head"):
        make_world({"person": 3, "city": 2}, RELS[:1], seed=0, fanout={"born_in": 3})


def test_compose_matches_networkx_paths():
    w = make_world(TYPES, RELS, seed=5, fanout={"works_for": 2})
    G = to_networkx(w)
    assert G.number_of_edges() == len(w.triples)
    want = set()
    for h in w.entities["person"]:
        for path in nx.all_simple_edge_paths(G, h, set(w.entities["city"]), cutoff=2):
            if [e[2] for e in path] == ["works_for", "based_in"]:
                want.add((h, path[-1][1]))
    got = compose(w, "works_for", "based_in")
    assert {(h, t) for h, _, t in got} == want and len(got) == len(want)


def test_questions_and_sentences():
    w = make_world(TYPES, RELS, seed=0)
    qs = questions(w, "born_in")
    assert len(qs) == 60 and all(q.startswith("where was ") and len(a) == 1 for q, a in qs)
    q2 = questions(w, "born_in.located_in", "in which country was {h} born ?")
    for (q, a), (h, _, t) in zip(q2, compose(w, "born_in", "located_in")):
        assert a == [w.tails(w.tails(h, "born_in")[0], "located_in")[0]]
    with pytest.raises(ValueError, match="no question template"):
        questions(w, "born_in.located_in")
    S = verbalise(w)
    assert len(S) == len(w.triples) and S[0] == w.relations[w.triples[0][1]].template.format(h=w.triples[0][0], t=w.triples[0][2])
    P = passages(S, 4, seed=0)
    assert len(P) == -(-len(S) // 4) and sorted(" ".join(P).split()) == sorted(" ".join(S).split())
