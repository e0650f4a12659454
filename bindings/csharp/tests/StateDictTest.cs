// Accelerator.GetStateDict (C-level checks: tests/capi/test_state_dict.c; 2 processes:
// tests/distributed/dist_state_dict.c): the model's keys in order with the values read inside summon_full_params
// of a sharded model, and a bad option named.
#if NUNIT
using System.Collections.Generic;
using System.Linq;
using Accel;
using NUnit.Framework;

namespace Accel.Tests
{
    [TestFixture]
    public class StateDictTest
    {
        [Test]
        public void StateDictOfAShardedModel()
        {
            using (var acc = new Accelerator("{\"fsdp_plugin\": {\"sharding_strategy\": \"FULL_SHARD\"}}"))
            using (var model = Model.FromJson("{\"type\": \"mlp\", \"widths\": [4, 8, 2]}"))
            {
                acc.Prepare(model, null, null, null);
                Dictionary<string, Tensor> sd = acc.GetStateDict(model);
                var names = new List<string>();
                for (long i = 0; i < model.NumParameters(); ++i)
                    names.Add(model.ParameterName(i));
                CollectionAssert.AreEqual(names, sd.Keys.ToList());
                acc.SummonFullParamsBegin(model);
                try
                {
                    foreach (var kv in sd)
                        using (var whole = model.GetTensor(kv.Key))
                            CollectionAssert.AreEqual(whole.ToFloatArray(), kv.Value.ToFloatArray(), kv.Key);
                }
                finally
                {
                    acc.SummonFullParamsEnd(model);
                }
                foreach (var t in sd.Values)
                    t.Dispose();
                var bad = Assert.Throws<InvalidArgumentError>(() => acc.GetStateDict(model, "{\"rank0_onl\": true}"));
                StringAssert.Contains("rank0_onl", bad.Message);
            }
        }
    }
}
#endif
