using System;
using System.Runtime.InteropServices;
using System.Threading;

[assembly: System.Runtime.CompilerServices.InternalsVisibleTo("Accel.Tests")]

namespace Accel {

/// <summary>
/// The native object behind one proxy (Tensor, Model, ...), as a <see cref="SafeHandle"/>: the proxies have no
/// finalizer of their own; Dispose() disposes this handle, and a proxy never disposed leaves it to the
/// runtime's critical finalizer. SafeHandle runs ReleaseHandle at most once, so Dispose() followed by a
/// collection (or Dispose() twice) frees the native object once. It holds the pointer and a static free
/// function, never the proxy.
/// </summary>
internal sealed class AccelHandle : SafeHandle {
    static long releases;
    readonly Action<IntPtr> free;

    internal AccelHandle(IntPtr ptr, bool ownsHandle, Action<IntPtr> free) : base(IntPtr.Zero, ownsHandle) {
        this.free = free;
        SetHandle(ptr);
    }

    public override bool IsInvalid { get { return handle == IntPtr.Zero; } }

    protected override bool ReleaseHandle() {
        free(handle);
        Interlocked.Increment(ref releases);
        return true;
    }

    /// <summary>Native objects freed so far by every handle of the process (for tests).</summary>
    internal static long Releases { get { return Interlocked.Read(ref releases); } }
}

}
