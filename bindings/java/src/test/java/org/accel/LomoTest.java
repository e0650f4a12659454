package org.accel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** LOMO through the Java binding (as bindings/python/tests/test_lomo.py): lomoBackward updates during backward
 *  (without clipping or weight decay, the weights of a plain backward and an SGD step), the optimizer has no step
 *  of its own, a bad learning rate is named. */
class LomoTest {
  private static final String MLP = "{\"type\": \"mlp\", \"widths\": [3, 4, 2]}";

  /** One step of `optimizer` (by lomoBackward, or backward + step), then its first parameter. */
  private static float[] firstWeightAfterStep(String optimizer, boolean lomo) {
    Accel.setSeed(7);
    try (Accelerator acc = new Accelerator(null); Model model = Model.fromJson(MLP);
         Optimizer opt = new Optimizer(model, optimizer)) {
      acc.prepare(model, opt, null, null);
      try (Tensor x = Tensor.of(new float[] {0.5f, -1f, 2f, 1.5f, 0.25f, -0.75f}, 2, 3);
           Tensor y = Tensor.of(new float[] {1f, -1f, 0f, 2f}, 2, 2); Tensor out = model.forward(x);
           Tensor loss = Accel.computeLoss("mse", out, y)) {
        if (lomo) {
          acc.lomoBackward(loss, 0.1);
          FailedPreconditionError e = assertThrows(FailedPreconditionError.class, opt::step);
          assertTrue(e.getMessage().contains("lomo_backward"), e.getMessage());
        } else {
          acc.backward(loss);
          opt.step();
        }
      }
      try (Tensor w = model.getTensor(model.parameterName(0))) {
        return w.toFloatArray();
      }
    }
  }

  @Test
  void lomoEqualsSgd() {
    float[] want = firstWeightAfterStep("{\"type\": \"sgd\", \"lr\": 0.1}", false);
    float[] before;
    Accel.setSeed(7);
    try (Model fresh = Model.fromJson(MLP); Tensor w = fresh.getTensor(fresh.parameterName(0))) {
      before = w.toFloatArray();
    }
    float[] got = firstWeightAfterStep("{\"type\": \"lomo\"}", true);
    assertArrayEquals(want, got, 1e-6f);
    boolean moved = false;
    for (int i = 0; i < got.length; ++i) moved |= got[i] != before[i];
    assertTrue(moved, "lomoBackward left the weights as they were");
  }

  @Test
  void badLearningRateIsNamed() {
    try (Accelerator acc = new Accelerator(null); Model model = Model.fromJson(MLP);
         Optimizer opt = new Optimizer(model, "{\"type\": \"lomo\"}")) {
      acc.prepare(model, opt, null, null);
      try (Tensor x = Tensor.of(new float[] {0.5f, -1f, 2f}, 1, 3); Tensor y = Tensor.of(new float[] {1f, 0f}, 1, 2);
           Tensor out = model.forward(x); Tensor loss = Accel.computeLoss("mse", out, y)) {
        InvalidArgumentError e = assertThrows(InvalidArgumentError.class, () -> acc.lomoBackward(loss, Double.NaN));
        assertTrue(e.getMessage().contains("learning_rate"), e.getMessage());
      }
    }
  }
}
