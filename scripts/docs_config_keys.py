#!/usr/bin/env python3
"""Prints, as JSON, the effective accelerator configuration that the built library reports
(accel_accelerator_get_config_json) for "{}" and with an empty fsdp_plugin / deepspeed_plugin: every key with
its default. scripts/docs_site.py runs it in a clean environment (no ACCELERATE_* or launcher variables) and
writes the reference table from it. Usage: docs_config_keys.py BUILD_DIR."""
import ctypes
import json
import os
import sys

lib = ctypes.CDLL(os.path.join(sys.argv[1], "libaccel.so"))
lib.accel_accelerator_create.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
lib.accel_accelerator_get_config_json.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
lib.accel_accelerator_free.argtypes = [ctypes.c_void_p]
lib.accel_string_free.argtypes = [ctypes.c_void_p]
lib.accel_last_error_message.restype = ctypes.c_char_p


def effective(config):
    acc, out = ctypes.c_void_p(), ctypes.c_void_p()
    if lib.accel_accelerator_create(config.encode(), ctypes.byref(acc)) != 0 or \
            lib.accel_accelerator_get_config_json(acc, ctypes.byref(out)) != 0:
        sys.exit("accel: %s: %s" % (config, lib.accel_last_error_message().decode()))
    text = ctypes.cast(out, ctypes.c_char_p).value.decode()
    lib.accel_string_free(out)
    lib.accel_accelerator_free(acc)
    return json.loads(text)


result = effective("{}")
for plugin in ("fsdp_plugin", "deepspeed_plugin"):
    result[plugin] = effective('{"%s": {}}' % plugin)[plugin]
print(json.dumps(result))
