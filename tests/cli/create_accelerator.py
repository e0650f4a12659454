"""A launched worker that creates an accelerator from its environment through libaccel's C API (ctypes), as a
program the real `accelerate launch` starts would, and writes OUT_DIR/rank<RANK>.json: {"status": the status name,
"message": accel_last_error_message(), "config": the effective configuration (accel_accelerator_get_config_json),
or null}. Usage: create_accelerator.py BUILD_DIR OUT_DIR"""
import ctypes
import json
import os
import sys

lib = ctypes.CDLL(os.path.join(sys.argv[1], "libaccel.so"))
lib.accel_last_error_message.restype = ctypes.c_char_p
lib.accel_status_name.restype = ctypes.c_char_p
acc = ctypes.c_void_p()
st = lib.accel_accelerator_create(None, ctypes.byref(acc))
out = {"status": lib.accel_status_name(st).decode(), "message": lib.accel_last_error_message().decode(), "config": None}
if st == 0:
    text = ctypes.c_char_p()
    if lib.accel_accelerator_get_config_json(acc, ctypes.byref(text)) == 0:
        out["config"] = json.loads(text.value.decode())
        lib.accel_string_free(text)
    lib.accel_accelerator_free(acc)
with open(os.path.join(sys.argv[2], "rank%s.json" % os.environ.get("RANK", "0")), "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
