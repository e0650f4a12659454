// Harness of the quick tour's Java block (tests/docs/run_snippets.py puts the block in place of the snippet line
// below, compiles it against build/bindings/java/accel.jar and runs it): it gives the block a learnable data set;
// the block must compile and train both of its loops without an exception.
import org.accel.Accel;
import org.accel.Accelerator;
import org.accel.Batch;
import org.accel.DataLoader;
import org.accel.Model;
import org.accel.Optimizer;
import org.accel.Tensor;

public class HarnessQuickTour {
  public static void main(String[] args) {
    java.util.Random random = new java.util.Random(42);
    float[] x = new float[2048 * 16];
    long[] y = new long[2048];
    for (int i = 0; i < 2048; i++) {   // class = which of the first 4 features is largest
      for (int f = 0; f < 16; f++) x[i * 16 + f] = random.nextFloat() - 0.5f;
      int best = 0;
      for (int c = 1; c < 4; c++) if (x[i * 16 + c] > x[i * 16 + best]) best = c;
      y[i] = best;
    }
@SNIPPET@
    System.out.println("the Java quick tour trained");
  }
}
