"""The merger's collector settings (run in a fresh interpreter: the suite's own stays as is)."""

import subprocess
import sys


def test_collect_less_freezes_the_loaded_heap_and_collects_young_objects_less_often():
    code = (
        "import gc; from merger.collector import YOUNG_COLLECTION_OBJECTS, collect_less; "
        "before = gc.get_freeze_count(); collect_less(); "
        "print(gc.get_threshold()[0] == YOUNG_COLLECTION_OBJECTS > 700, gc.get_freeze_count() > before)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["True", "True"]
