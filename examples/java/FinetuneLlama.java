/*
 * Fine-tune a Llama model from a Hugging Face folder with LoRA adapters through accel's Java bindings, save the
 * adapter (PEFT's adapter_model.safetensors + adapter_config.json) and generate: what a JVM fine-tuning service does.
 *
 *   javac -cp accel.jar -d classes FinetuneLlama.java
 *   java -cp accel.jar:classes FinetuneLlama MODEL_DIR ADAPTER_DIR [--steps N] [--config JSON]
 *
 * The same program as examples/c/finetune_llama.c (same token sequence, adapters, optimizer and seed, so it prints
 * the same losses): MODEL_DIR is what transformers' save_pretrained writes (the tests make a small one with
 * tests/python/llama_reference.py, no download); Model.fromPretrained hands {"lora": ...} into the model spec, the
 * base weights stay frozen, the r-8 adapters on q_proj and v_proj train, Model.savePretrained with adapter_only
 * writes PEFT's folder. Exits non-zero unless the last loss is below half the first.
 */
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.accel.Accel;
import org.accel.Accelerator;
import org.accel.Batch;
import org.accel.DataLoader;
import org.accel.Model;
import org.accel.Optimizer;
import org.accel.Tensor;

public final class FinetuneLlama {
  static final String LORA = "{\"lora\": {\"r\": 8, \"lora_alpha\": 16, \"lora_dropout\": 0.0, "
      + "\"target_modules\": [\"q_proj\", \"v_proj\"]}}";

  /** Greedy continuation of a 6-token prompt, printed on the main process. */
  static void showGeneration(Accelerator acc, Model model, long[] stream, String label) {
    long[] prompt = java.util.Arrays.copyOfRange(stream, 100, 106);
    try (Tensor in = Tensor.of(prompt, prompt.length); Tensor out = model.generate(in, "{\"max_new_tokens\": 10}")) {
      StringBuilder line = new StringBuilder(label + ":");
      for (long t : out.toLongArray()) line.append(' ').append(t);
      acc.print(line.toString());
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 2) {
      System.err.println("usage: FinetuneLlama MODEL_DIR ADAPTER_DIR [--steps N] [--config JSON]");
      System.exit(2);
    }
    String modelDir = args[0], adapterDir = args[1], config = null;
    long steps = 60;
    for (int i = 2; i + 1 < args.length; i += 2) {
      if (args[i].equals("--steps")) steps = Long.parseLong(args[i + 1]);
      else if (args[i].equals("--config")) config = args[i + 1];
    }
    String configJson = new String(Files.readAllBytes(Paths.get(modelDir, "config.json")), StandardCharsets.UTF_8);
    Matcher m = Pattern.compile("\"vocab_size\"\\s*:\\s*(\\d+)").matcher(configJson);
    if (!m.find()) throw new IllegalArgumentException(modelDir + "/config.json has no vocab_size");
    long vocab = Long.parseLong(m.group(1));
    long[] stream = new long[4096];
    for (int i = 1; i < stream.length; ++i) stream[i] = (stream[i - 1] + 1 + (i / 7) % 3) % vocab;

    Accel.setSeed(42);
    double first = -1, loss = 0;
    try (Accelerator acc = new Accelerator(config);
         Model model = Model.fromPretrained(modelDir, LORA);
         Tensor tokens = Tensor.of(stream, stream.length)) {
      showGeneration(acc, model, stream, "before");
      try (DataLoader loader = DataLoader.fromTokens(tokens, "{\"block_size\": 32, \"batch_size\": 8, \"shuffle\": true}");
           // Only the adapters train: the frozen base weights get no optimizer state.
           Optimizer opt = new Optimizer(model, "{\"type\": \"adamw\", \"lr\": 0.01}")) {
        acc.prepare(model, opt, loader, null);
        long step = 0;
        for (long epoch = 0; step < steps; ++epoch) {
          loader.setEpoch(epoch);
          Batch batch;
          while (step < steps && (batch = loader.nextBatch()) != null) {
            try (Batch b = batch) {
              loss = acc.trainStep(model, opt, null, b, "causal_lm");
            }
            if (first < 0) first = loss;
            if (++step % 10 == 0) acc.print(String.format(Locale.ROOT, "step %d: loss %.4f", step, loss));
          }
        }
      }
      // PEFT's adapter folder (every process calls it; the main process writes).
      model.savePretrained(adapterDir, "{\"adapter_only\": true}");
      model.eval();
      showGeneration(acc, model, stream, "after");
      acc.print(String.format(Locale.ROOT, "first loss %.4f, last loss %.4f; adapter saved in %s", first, loss, adapterDir));
    }
    if (!(loss < 0.5 * first)) {
      System.err.printf(Locale.ROOT, "FinetuneLlama: the loss did not halve (%.4f -> %.4f)%n", first, loss);
      System.exit(1);
    }
  }
}
