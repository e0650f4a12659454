"""Logging from Python: libaccel's messages (its own warnings included) reach Python's logging, get_logger's
MultiProcessAdapter with main_process_only / in_order in one process, and the level (several processes:
tests/distributed/dist_log.c)."""

import logging

import pytest

import accel


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def records():
    handler = Records()
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    yield handler.records
    root.removeHandler(handler)
    root.setLevel(old)
    accel.log_set_level(logging.WARNING)


def test_get_logger_routes_to_python_logging(records):
    logger = accel.get_logger("accel_test.train", log_level="INFO")
    assert accel.log_get_level() == logging.INFO
    logger.info("epoch %d", 3)
    logger.debug("hidden")
    logger.warning("every process", main_process_only=False)
    with accel.Accelerator() as acc:
        logger.error("ordered", main_process_only=False, in_order=True, accelerator=acc)
    got = [(r.name, r.levelno, r.getMessage(), r.process_index) for r in records]
    assert got == [("accel_test.train", logging.INFO, "epoch 3", 0),
                   ("accel_test.train", logging.WARNING, "every process", 0),
                   ("accel_test.train", logging.ERROR, "ordered", 0)]


def test_library_warnings_reach_python_logging(records, tmp_path):
    # load_checkpoint of weights that miss keys warns (main process) through logger "accel".
    with accel.Accelerator() as acc:
        small = accel.Model.from_json('{"type": "mlp", "widths": [6, 16, 3]}')
        big = accel.Model.from_json('{"type": "mlp", "widths": [6, 16, 3, 3]}')
        acc.save_model(small, str(tmp_path))
        big.load_checkpoint(str(tmp_path))
    mine = [r for r in records if r.name == "accel"]
    assert len(mine) == 1 and mine[0].levelno == logging.WARNING
    assert "load_checkpoint" in mine[0].getMessage() and "4.weight" in mine[0].getMessage()


def test_level_and_errors(records):
    with pytest.raises(ValueError):
        accel.log_set_level(99)
    with pytest.raises(ValueError):
        accel.get_logger("x", log_level="LOUD")
    accel.log_set_level(logging.ERROR)
    accel.get_logger("accel_test.quiet").warning("dropped below ERROR")
    assert [r for r in records if r.name == "accel_test.quiet"] == []


def test_back_to_stderr(records, capfd):
    accel.route_to_python_logging(False)
    try:
        accel.log_write(None, "accel_test.plain", logging.WARNING, "to stderr")
        assert "accel_test.plain: warning: to stderr\n" in capfd.readouterr().err
        assert records == []
    finally:
        accel.route_to_python_logging(True)
