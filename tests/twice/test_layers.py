"""The layers table: one row per layer, everything the rest of twice reads about a layer."""

from __future__ import annotations

from twice.layers import BY_SEVERITY, LAYERS, REMEDIES, Band, Layer, usual_suspects


def test_every_layer_has_one_complete_row() -> None:
    assert set(LAYERS) == set(Layer)
    for layer, info in LAYERS.items():
        assert info.layer is layer
        assert info.plain and info.fingerprints and info.fix and info.colour.startswith("#")
        assert info.home <= info.bands  # where it is the suspect, its gap is usual
        assert info.remedies and info.remedies <= set(REMEDIES)
    assert len({info.colour for info in LAYERS.values()}) == len(LAYERS)
    assert len({info.severity for info in LAYERS.values()}) == len(LAYERS)


def test_every_band_has_a_suspect_and_the_worst_layer_comes_first() -> None:
    for band in Band:
        assert usual_suspects(band)
    assert usual_suspects(Band.SECONDS)[0] is Layer.SDK_RETRY
    assert BY_SEVERITY[0] is Layer.REDELIVERY and BY_SEVERITY[-1] is Layer.UNKNOWN


def test_a_derived_key_stops_every_re_execution_but_the_models() -> None:
    for layer in (Layer.SDK_RETRY, Layer.GATEWAY_RETRY, Layer.STEP_RETRY, Layer.REDELIVERY):
        assert "derived_key" in LAYERS[layer].remedies
    assert LAYERS[Layer.MODEL_REEMISSION].remedies == {"unknown_outcome"}
