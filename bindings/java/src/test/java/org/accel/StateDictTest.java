package org.accel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Accelerator.getStateDict (C-level checks: tests/capi/test_state_dict.c; 2 processes:
 *  tests/distributed/dist_state_dict.c): the model's keys in order with the values read inside summon_full_params
 *  of a sharded model, and a bad option named. */
class StateDictTest {
  @Test
  void stateDictOfAShardedModel() {
    try (Accelerator acc = new Accelerator("{\"fsdp_plugin\": {\"sharding_strategy\": \"FULL_SHARD\"}}");
         Model model = Model.fromJson("{\"type\": \"mlp\", \"widths\": [4, 8, 2]}")) {
      acc.prepare(model, null, null, null);
      Map<String, Tensor> sd = acc.getStateDict(model);
      List<String> names = new ArrayList<>();
      for (long i = 0; i < model.numParameters(); ++i) names.add(model.parameterName(i));
      assertEquals(names, new ArrayList<>(sd.keySet()));
      acc.summonFullParamsBegin(model);
      try {
        for (Map.Entry<String, Tensor> e : sd.entrySet()) {
          try (Tensor whole = model.getTensor(e.getKey())) {
            assertArrayEquals(whole.toFloatArray(), e.getValue().toFloatArray(), e.getKey());
          }
        }
      } finally {
        acc.summonFullParamsEnd(model);
      }
      for (Tensor t : sd.values()) t.close();
      InvalidArgumentError bad = assertThrows(InvalidArgumentError.class,
          () -> acc.getStateDict(model, "{\"rank0_onl\": true}"));
      assertTrue(bad.getMessage().contains("rank0_onl"), bad.getMessage());
    }
  }
}
