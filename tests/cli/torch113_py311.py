"""torch 1.13's torchrun under Python 3.11 (Debian 12's python3-torch): Std.from_str("0") returns None there (3.11's
Flag iteration leaves out the 0 member), so torchrun cannot start workers. patch() makes from_str return Std.NONE,
the value 1.13 means. Not a change to torch's behaviour otherwise; imported by the tests that run torchrun."""


def patch():
    from torch.distributed.elastic.multiprocessing import api

    if getattr(api.Std, "_accel_patched", False):
        return
    original = api.Std.from_str.__func__

    def fixed_from_str(cls, vm):
        std = original(cls, vm)
        return api.Std.NONE if std is None else std

    api.Std.from_str = classmethod(fixed_from_str)
    api.Std._accel_patched = True


if __name__ == "__main__":  # torch113_py311.py [torchrun arguments...]: torchrun, patched
    import sys

    patch()
    from torch.distributed.run import main

    sys.argv = ["torchrun"] + sys.argv[1:]
    main()
