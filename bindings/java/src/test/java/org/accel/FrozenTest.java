package org.accel;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * Frozen parameters through the Java binding: Model.setRequiresGrad / requiresGrad, the spec's "frozen", and the
 * refusals (a glob matching nothing, a change while an optimizer holds the parameters).
 */
class FrozenTest {
  @Test
  void globsSpecAndRefusals() {
    try (Model model = Model.fromJson("{\"type\": \"mlp\", \"widths\": [4, 8, 2]}")) {
      assertTrue(model.requiresGrad("0.weight"));
      model.setRequiresGrad("0.*", false);
      assertFalse(model.requiresGrad("0.weight"));
      assertFalse(model.requiresGrad("0.bias"));
      assertTrue(model.requiresGrad("2.weight"));
      InvalidArgumentError e = assertThrows(InvalidArgumentError.class, () -> model.setRequiresGrad("encoder.*", false));
      assertTrue(e.getMessage().contains("encoder.*"), e.getMessage());
      try (Optimizer opt = new Optimizer(model, "{\"type\": \"sgd\", \"lr\": 0.1}")) {
        assertThrows(FailedPreconditionError.class, () -> model.setRequiresGrad("2.*", false));
      }
    }
    try (Model spec = Model.fromJson("{\"type\": \"mlp\", \"widths\": [4, 8, 2], \"frozen\": [\"*.bias\"]}")) {
      assertFalse(spec.requiresGrad("2.bias"));
      assertTrue(spec.requiresGrad("2.weight"));
    }
  }
}
