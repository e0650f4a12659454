// Train an MLP on a synthetic classification set through accel's C# bindings (Mono).
//
//   mcs TrainMlp.cs -r:Accel.dll && mono TrainMlp.exe ['<accelerator config JSON>']
//
// The same program as examples/c/train_mlp.c: the same data generator and seed, so it prints the same
// losses. Exits non-zero if training accuracy stays below 95 %.
using System;
using System.Diagnostics;
using System.Globalization;
using Accel;

static class TrainMlp
{
    const int NumSamples = 2048, NumFeatures = 16, NumClasses = 4, Epochs = 8;

    // The C example's generator: a 64-bit LCG and Box-Muller, so the data set is the same everywhere.
    sealed class Lcg
    {
        ulong state = 0x9E3779B97F4A7C15UL;

        public double Uniform()
        {
            unchecked { state = state * 6364136223846793005UL + 1442695040888963407UL; }
            return ((state >> 11) + 0.5) / 9007199254740992.0;
        }

        public double Gaussian()
        {
            double u1 = Uniform();
            double u2 = Uniform();
            return Math.Sqrt(-2.0 * Math.Log(u1)) * Math.Cos(6.283185307179586 * u2);
        }
    }

    static double Accuracy(Model model, Tensor features, long[] labels)
    {
        model.Eval();
        float[] logits;
        using (var outputs = model.ForwardNoGrad(features))
            logits = outputs.ToFloatArray();
        model.Train();
        int correct = 0;
        for (int i = 0; i < NumSamples; ++i) {
            int best = 0;
            for (int c = 1; c < NumClasses; ++c)
                if (logits[i * NumClasses + c] > logits[i * NumClasses + best])
                    best = c;
            if (best == labels[i])
                ++correct;
        }
        return (double)correct / NumSamples;
    }

    static int Main(string[] args)
    {
        CultureInfo.DefaultThreadCurrentCulture = CultureInfo.InvariantCulture;
        CultureInfo.CurrentCulture = CultureInfo.InvariantCulture;
        var rng = new Lcg();
        var centers = new double[NumClasses, NumFeatures];
        for (int c = 0; c < NumClasses; ++c)
            for (int f = 0; f < NumFeatures; ++f)
                centers[c, f] = 1.0 * rng.Gaussian();
        var x = new float[NumSamples * NumFeatures];
        var y = new long[NumSamples];
        for (int i = 0; i < NumSamples; ++i) {
            int c = i % NumClasses;
            y[i] = c;
            for (int f = 0; f < NumFeatures; ++f)
                x[i * NumFeatures + f] = (float)(centers[c, f] + rng.Gaussian());
        }

        double accValue = 0.0, finalLoss = 0.0;
        try {
            Library.SetSeed(42);
            using (var acc = new Accelerator(args.Length > 0 ? args[0] : null))
            using (var features = Tensor.Of(x, NumSamples, NumFeatures))
            using (var labels = Tensor.Of(y, NumSamples))
            using (var model = Model.FromJson("{\"type\": \"mlp\", \"widths\": [16, 64, 64, 4], \"activation\": \"relu\"}"))
            using (var opt = new Optimizer(model, "{\"type\": \"adamw\", \"lr\": 0.003}"))
            using (var dl = new DataLoader(features, labels, "{\"batch_size\": 64, \"shuffle\": true, \"seed\": 42}"))
            using (var sched = new Scheduler(opt, string.Format(
                       "{{\"type\": \"cosine\", \"num_warmup_steps\": 10, \"num_training_steps\": {0}}}",
                       Epochs * dl.Length() / acc.GradientAccumulationSteps()))) {
                acc.Prepare(model, opt, dl, sched);
                // Every step's loss and learning rate go to the trackers of the config's "log_with" (none: nothing).
                acc.InitTrackers("train_mlp", "{\"lr\": 0.003, \"batch_size\": 64, \"epochs\": " + Epochs + "}", null);
                // A progress bar on the main process when the output is a terminal (accel launch: ACCEL_PROGRESS_TTY).
                bool bar = acc.IsMainProcess() &&
                           (!Console.IsOutputRedirected || Environment.GetEnvironmentVariable("ACCEL_PROGRESS_TTY") == "1");
                long batches = dl.Length(), globalStep = 0;
                var inv = System.Globalization.CultureInfo.InvariantCulture;
                for (int epoch = 1; epoch <= Epochs; ++epoch) {
                    var watch = Stopwatch.StartNew();
                    double lossSum = 0.0;
                    long steps = 0;
                    foreach (var batch in dl) {
                        double loss;
                        using (batch)
                            loss = acc.TrainStep(model, opt, sched, batch, "cross_entropy");
                        acc.Log("{\"loss\": " + loss.ToString("R", inv) + ", \"lr\": " + sched.GetLastLr().ToString("R", inv) + "}",
                                globalStep++);
                        lossSum += loss;
                        ++steps;
                        if (bar) {
                            int filled = (int)(20 * steps / batches);
                            Console.Write(string.Format(inv, "\repoch {0}/{1} [{2}{3}] {4}/{5}  {6:F0} samples/s  loss {7:F4}",
                                epoch, Epochs, new string('#', filled), new string('.', 20 - filled), steps, batches,
                                steps * 64.0 * acc.NumProcesses() / watch.Elapsed.TotalSeconds, lossSum / steps));
                        }
                    }
                    if (bar) Console.Write("\r\u001b[K");
                    accValue = Accuracy(model, features, y);
                    finalLoss = lossSum / steps;
                    acc.Print(string.Format("epoch {0}/{1}  loss {2:F4}  train accuracy {3,5:F1}%  lr {4:F5}  ({5:F2} s)",
                        epoch, Epochs, finalLoss, 100.0 * accValue, sched.GetLastLr(), watch.Elapsed.TotalSeconds));
                }
                acc.Print(string.Format("final loss {0:F8}", finalLoss));
                acc.EndTraining();
            }
        } catch (AccelError e) {
            Console.Error.WriteLine("TrainMlp: " + e.StatusName + ": " + e.Message);
            return 1;
        }
        if (accValue < 0.95) {
            Console.Error.WriteLine(string.Format("TrainMlp: training accuracy {0:F1}% is below 95%", 100.0 * accValue));
            return 1;
        }
        return 0;
    }
}
