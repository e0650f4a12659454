/* Trains two steps through the accel jar resolved by Maven and prints where libaccel was loaded from. */
import java.nio.file.Files;
import java.nio.file.Path;
import org.accel.Accel;
import org.accel.Accelerator;
import org.accel.Batch;
import org.accel.DataLoader;
import org.accel.Model;
import org.accel.Optimizer;
import org.accel.Tensor;

public final class TrainTwoSteps {
  public static void main(String[] args) throws Exception {
    final int n = 128, f = 8;
    float[] x = new float[n * f];
    long[] y = new long[n];
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < f; ++j)
        x[i * f + j] = (((i * 7 + j * 13) % 17) - 8) / 8.0f;
      y[i] = x[i * f] > 0 ? 1 : 0;
    }
    double[] loss = new double[2];
    int steps = 0;
    Accel.setSeed(42);
    try (Accelerator acc = new Accelerator("{}");
         Tensor features = Tensor.of(x, n, f);
         Tensor labels = Tensor.of(y, n);
         Model model = Model.fromJson("{\"type\": \"mlp\", \"widths\": [8, 16, 2]}");
         Optimizer opt = new Optimizer(model, "{\"type\": \"sgd\", \"lr\": 0.1}");
         DataLoader dl = new DataLoader(features, labels, "{\"batch_size\": 64}")) {
      acc.prepare(model, opt, dl);
      for (Batch batch : dl) {
        try (batch) {
          loss[steps++] = acc.trainStep(model, opt, null, batch, "cross_entropy");
        }
        if (steps == 2)
          break;
      }
    }
    String lib = Files.readAllLines(Path.of("/proc/self/maps")).stream().filter(l -> l.contains("libaccel.so"))
        .map(l -> l.substring(l.lastIndexOf(' ') + 1)).findFirst().orElse("(not mapped)");
    System.out.printf(java.util.Locale.ROOT, "accel %s from %s: %d steps, loss %.4f -> %.4f%n", Accel.versionString(),
        lib, steps, loss[0], loss[1]);
  }
}
