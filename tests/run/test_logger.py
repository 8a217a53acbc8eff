"""The training log's progress bar stays within its total."""

from embodied.run.logger import Logger


def test_progress_bar_stops_at_its_total(tmp_path):
    log = Logger(tmp_path / "tb", total_steps=300, start_step=100, progress=True)
    for _ in range(3):
        log.progress(96)  # whole rollouts: 100 + 3 * 96 = 388 > 300
    assert log.bar.n == 300 and log.bar.total == 300
    log.close()
