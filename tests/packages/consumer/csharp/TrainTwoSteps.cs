// Trains two steps through the Accel NuGet package restored from a local feed and prints where libaccel was loaded from.
using System;
using System.IO;
using System.Linq;
using Accel;

public static class TrainTwoSteps {
    public static int Main() {
        const int n = 128, f = 8;
        var x = new float[n * f];
        var y = new long[n];
        for (int i = 0; i < n; ++i) {
            for (int j = 0; j < f; ++j)
                x[i * f + j] = (((i * 7 + j * 13) % 17) - 8) / 8.0f;
            y[i] = x[i * f] > 0 ? 1 : 0;
        }
        var loss = new double[2];
        int steps = 0;
        Library.SetSeed(42);
        using (var acc = new Accelerator("{}"))
        using (var features = Tensor.Of(x, n, f))
        using (var labels = Tensor.Of(y, n))
        using (var model = Model.FromJson("{\"type\": \"mlp\", \"widths\": [8, 16, 2]}"))
        using (var opt = new Optimizer(model, "{\"type\": \"sgd\", \"lr\": 0.1}"))
        using (var dl = new DataLoader(features, labels, "{\"batch_size\": 64}")) {
            acc.Prepare(model, opt, dl);
            foreach (var batch in dl) {
                using (batch)
                    loss[steps++] = acc.TrainStep(model, opt, null, batch, "cross_entropy");
                if (steps == 2)
                    break;
            }
        }
        string lib = File.ReadAllLines("/proc/self/maps").Where(l => l.Contains("libaccel.so"))
            .Select(l => l.Substring(l.LastIndexOf(' ') + 1)).DefaultIfEmpty("(not mapped)").First();
        Console.WriteLine(string.Format(System.Globalization.CultureInfo.InvariantCulture,
            "accel {0} from {1}: {2} steps, loss {3:F4} -> {4:F4}", Library.VersionString(), lib, steps, loss[0], loss[1]));
        return steps == 2 ? 0 : 1;
    }
}
