"""The GPU check's own tools on the CPU (benchmarks/gpu/): the fixtures
Chainer records here and the script that replays them there.  Nothing else
runs them between GPU sessions, and an API change once left the recorder
unable to run."""
import json
import os
import subprocess
import sys

import pytest

GPU = os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks', 'gpu')


@pytest.mark.slow
def test_recorded_fixtures_replay_equal_to_numpy_in_the_dry_run(tmp_path):
    fixtures, out = tmp_path / 'fixtures', tmp_path / 'out'
    subprocess.run([sys.executable, os.path.join(GPU, 'make_fixtures.py'), '--out',
                    str(fixtures)], check=True, capture_output=True, text=True)
    manifest = json.loads((fixtures / 'manifest.json').read_text())
    assert {'inference', 'training_step'} <= {entry['program'] for entry in manifest}
    subprocess.run([sys.executable, os.path.join(GPU, 'run_gpu_checks.py'), '--dry-run',
                    '--fixtures', str(fixtures), '--out', str(out)], check=True,
                   capture_output=True, text=True, timeout=600)
    stage = json.loads((out / 'gpu_results.json').read_text())['stages']['D_fixtures']
    assert stage['status'] == 'ok' and stage['all_equal_to_numpy'], stage
    assert len(stage['programs']) == len(manifest)
