/*
 * Train an MLP on a synthetic classification set through accel's Java bindings.
 *
 *   java -cp accel.jar:. TrainMlp ['<accelerator config JSON>']
 *
 * The same program as examples/c/train_mlp.c: the same data generator and seed, so it prints the same
 * losses. Exits non-zero if training accuracy stays below 95 %.
 */
import org.accel.Accel;
import org.accel.AccelError;
import org.accel.Accelerator;
import org.accel.Batch;
import org.accel.DataLoader;
import org.accel.Model;
import org.accel.Optimizer;
import org.accel.Scheduler;
import org.accel.Tensor;

public final class TrainMlp {
  static final int NUM_SAMPLES = 2048, NUM_FEATURES = 16, NUM_CLASSES = 4, EPOCHS = 8;

  /** The C example's generator: a 64-bit LCG and Box-Muller, so the data set is the same everywhere. */
  static final class Lcg {
    private long state = 0x9E3779B97F4A7C15L;

    double uniform() {
      state = state * 6364136223846793005L + 1442695040888963407L;
      return ((state >>> 11) + 0.5) / 9007199254740992.0;
    }

    double gaussian() {
      double u1 = uniform();
      double u2 = uniform();
      return StrictMath.sqrt(-2.0 * StrictMath.log(u1)) * StrictMath.cos(6.283185307179586 * u2);
    }
  }

  static double accuracy(Model model, Tensor features, long[] labels) {
    model.eval();
    float[] logits;
    try (Tensor outputs = model.forwardNoGrad(features)) {
      logits = outputs.toFloatArray();
    }
    model.train();
    int correct = 0;
    for (int i = 0; i < NUM_SAMPLES; ++i) {
      int best = 0;
      for (int c = 1; c < NUM_CLASSES; ++c)
        if (logits[i * NUM_CLASSES + c] > logits[i * NUM_CLASSES + best])
          best = c;
      if (best == labels[i])
        ++correct;
    }
    return (double) correct / NUM_SAMPLES;
  }

  public static void main(String[] args) {
    Lcg rng = new Lcg();
    double[][] centers = new double[NUM_CLASSES][NUM_FEATURES];
    for (double[] center : centers)
      for (int f = 0; f < NUM_FEATURES; ++f)
        center[f] = 1.0 * rng.gaussian();
    float[] x = new float[NUM_SAMPLES * NUM_FEATURES];
    long[] y = new long[NUM_SAMPLES];
    for (int i = 0; i < NUM_SAMPLES; ++i) {
      int c = i % NUM_CLASSES;
      y[i] = c;
      for (int f = 0; f < NUM_FEATURES; ++f)
        x[i * NUM_FEATURES + f] = (float) (centers[c][f] + rng.gaussian());
    }

    double accValue = 0.0, finalLoss = 0.0;
    try {
      Accel.setSeed(42);
      try (Accelerator acc = new Accelerator(args.length > 0 ? args[0] : null);
           Tensor features = Tensor.of(x, NUM_SAMPLES, NUM_FEATURES);
           Tensor labels = Tensor.of(y, NUM_SAMPLES);
           Model model = Model.fromJson("{\"type\": \"mlp\", \"widths\": [16, 64, 64, 4], \"activation\": \"relu\"}");
           Optimizer opt = new Optimizer(model, "{\"type\": \"adamw\", \"lr\": 0.003}");
           DataLoader dl = new DataLoader(features, labels, "{\"batch_size\": 64, \"shuffle\": true, \"seed\": 42}");
           Scheduler sched = new Scheduler(opt, String.format(java.util.Locale.ROOT,
               "{\"type\": \"cosine\", \"num_warmup_steps\": 10, \"num_training_steps\": %d}",
               EPOCHS * dl.length() / acc.gradientAccumulationSteps()))) {
        acc.prepare(model, opt, dl, sched);
        // Every step's loss and learning rate go to the trackers of the config's "log_with" (none: nothing).
        acc.initTrackers("train_mlp", "{\"lr\": 0.003, \"batch_size\": 64, \"epochs\": " + EPOCHS + "}", null);
        // A progress bar on the main process when the output is a terminal (accel launch: ACCEL_PROGRESS_TTY).
        boolean bar = acc.isMainProcess()
            && (System.console() != null || "1".equals(System.getenv("ACCEL_PROGRESS_TTY")));
        long batches = dl.length(), globalStep = 0;
        for (int epoch = 1; epoch <= EPOCHS; ++epoch) {
          long start = System.nanoTime();
          double lossSum = 0.0;
          long steps = 0;
          for (Batch batch : dl) {
            double loss;
            try (batch) {
              loss = acc.trainStep(model, opt, sched, batch, "cross_entropy");
            }
            acc.log(String.format(java.util.Locale.ROOT, "{\"loss\": %.9g, \"lr\": %.9g}", loss, sched.getLastLr()),
                globalStep++);
            lossSum += loss;
            ++steps;
            if (bar) {
              int filled = (int) (20 * steps / batches);
              System.out.print(String.format(java.util.Locale.ROOT, "\repoch %d/%d [%s%s] %d/%d  %.0f samples/s  loss %.4f",
                  epoch, EPOCHS, "#".repeat(filled), ".".repeat(20 - filled), steps, batches,
                  steps * 64.0 * acc.numProcesses() / ((System.nanoTime() - start) / 1e9), lossSum / steps));
              System.out.flush();
            }
          }
          if (bar) {
            System.out.print("\r\033[K"); // before the epoch line, which the library writes through C's stdout
            System.out.flush();
          }
          accValue = accuracy(model, features, y);
          finalLoss = lossSum / steps;
          acc.print(String.format(java.util.Locale.ROOT, "epoch %d/%d  loss %.4f  train accuracy %5.1f%%  lr %.5f  (%.2f s)", epoch, EPOCHS,
              finalLoss, 100.0 * accValue, sched.getLastLr(), (System.nanoTime() - start) / 1e9));
        }
        acc.print(String.format(java.util.Locale.ROOT, "final loss %.8f", finalLoss));
        acc.endTraining();
      }
    } catch (AccelError e) {
      System.err.println("TrainMlp: " + e.getStatusName() + ": " + e.getMessage());
      System.exit(1);
    }
    if (accValue < 0.95) {
      System.err.printf(java.util.Locale.ROOT, "TrainMlp: training accuracy %.1f%% is below 95%%%n", 100.0 * accValue);
      System.exit(1);
    }
  }
}
