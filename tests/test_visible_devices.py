from jiyu_magics.core.gpu.visible_devices import parse_visible_devices

UUIDS = ["GPU-aaaa-1", "GPU-bbbb-2", "GPU-cccc-3"]


def test_unset_shows_every_gpu_in_order():
    v = parse_visible_devices(None, UUIDS)
    assert v.order == [0, 1, 2] and not v.restricted and v.invalid is None


def test_indices_reorder_devices():
    v = parse_visible_devices("2,0", UUIDS)
    assert v.order == [2, 0]
    assert v.visible_index(2) == 0 and v.visible_index(0) == 1 and v.visible_index(1) is None


def test_uuid_prefixes_match_uniquely():
    assert parse_visible_devices("GPU-bbbb", UUIDS).order == [1]
    ambiguous = parse_visible_devices("GPU-", UUIDS)
    assert ambiguous.order == [] and ambiguous.invalid == "GPU-"


def test_runtime_stops_at_the_first_invalid_entry():
    v = parse_visible_devices("1,7,0", UUIDS)
    assert v.order == [1] and v.invalid == "7"


def test_empty_and_minus_one_hide_everything():
    assert parse_visible_devices("", UUIDS).order == []
    v = parse_visible_devices("-1", UUIDS)
    assert v.order == [] and v.invalid == "-1"


def test_duplicates_are_invalid():
    v = parse_visible_devices("0,0", UUIDS)
    assert v.order == [0] and v.invalid == "0"


def test_mig_uuids_are_not_flagged_invalid():
    v = parse_visible_devices("MIG-1234abcd", UUIDS)
    assert v.invalid is None and v.mig == ["MIG-1234abcd"]
