// Harness of the quick tour's C# block (tests/docs/run_snippets.py puts the block in place of the snippet line
// below, compiles it against build/bindings/csharp/Accel.dll and runs it under Mono): it gives the block a
// learnable data set; the block must compile and train both of its loops without an exception.
using System;
using Accel;

public static class HarnessQuickTour
{
    public static void Main()
    {
        var random = new Random(42);
        var x = new float[2048 * 16];
        var y = new long[2048];
        for (int i = 0; i < 2048; i++) {   // class = which of the first 4 features is largest
            for (int f = 0; f < 16; f++) x[i * 16 + f] = (float)random.NextDouble() - 0.5f;
            int best = 0;
            for (int c = 1; c < 4; c++) if (x[i * 16 + c] > x[i * 16 + best]) best = c;
            y[i] = best;
        }
@SNIPPET@
        Console.WriteLine("the C# quick tour trained");
    }
}
