"""DataLoader.from_files (accel_dataloader_create_from_files): a token file gives from_tokens' batches, an
.npy pair (written with numpy when it is installed) the tensor loader's; errors are accel exceptions naming
the file."""

import array
import os

import pytest

import accel


def test_token_file_equals_from_tokens(tmp_path):
    tokens = [(i * 7919 + 3) % 1000 for i in range(500)]
    path = tmp_path / "train.bin"
    path.write_bytes(array.array("H", tokens).tobytes())  # uint16, little-endian on this host
    keys = '"block_size": 16, "batch_size": 4, "shuffle": true, "seed": 9'
    files = accel.DataLoader.from_files('{"format": "tokens", "files": "%s", "dtype": "uint16", %s}' % (path, keys))
    memory = accel.DataLoader.from_tokens(accel.tensor(tokens), "{%s}" % keys)
    assert files.length() == memory.length() == ((500 - 17) // 16 + 1 + 3) // 4
    while True:
        a, b = files.next_batch(), memory.next_batch()
        assert (a is None) == (b is None)
        if a is None:
            break
        assert a.inputs().tolist() == b.inputs().tolist()
        assert a.labels().tolist() == b.labels().tolist()


def test_npy_samples(tmp_path):
    np = pytest.importorskip("numpy")
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    y = np.arange(10, dtype=np.int64) * 2
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    dl = accel.DataLoader.from_files('{"format": "npy", "features": "%s", "labels": "%s", "batch_size": 4}'
                                     % (tmp_path / "x.npy", tmp_path / "y.npy"))
    b = dl.next_batch()
    assert b.inputs().tolist() == x[:4].tolist()
    assert b.labels().tolist() == y[:4].tolist()
    np.save(tmp_path / "f.npy", np.asfortranarray(np.ones((3, 2), dtype=np.float32)))
    with pytest.raises(accel.UnimplementedError, match="fortran_order"):
        accel.DataLoader.from_files('{"format": "npy", "features": "%s"}' % (tmp_path / "f.npy"))


def test_errors_name_the_file(tmp_path):
    missing = os.path.join(str(tmp_path), "missing.bin")
    with pytest.raises(accel.NotFoundError, match="missing.bin"):
        accel.DataLoader.from_files('{"format": "tokens", "files": "%s", "dtype": "uint16", "block_size": 4}' % missing)
    with pytest.raises(accel.InvalidArgumentError, match="dtype"):
        accel.DataLoader.from_files('{"format": "tokens", "files": "%s", "dtype": "uint17", "block_size": 4}' % missing)
