/*
 * Train a character-level GPT on Debian's licence texts through accel's Java bindings.
 *
 *   javac -cp accel.jar -d classes TrainGpt.java
 *   java -cp accel.jar:classes TrainGpt [--steps N] [--eval-every N] [--max-val-loss X] [--save DIR]
 *       [--save-every N] [--stop-at N] [--resume DIR/step_N] [--text-dir DIR] [--config JSON]
 *
 * The same program as examples/c/train_gpt.c (same text, vocabulary, split, model, optimizer, schedule, data
 * order and seeds, so it prints the same losses): a 4-layer GPT-2 ({"type": "gpt"}) trained on windows of
 * 128 characters (DataLoader.fromTokens) with the "causal_lm" loss, periodic validation, saveState / resume
 * from a folder named step_<N>, and generated text at the end (Model.generate). Exits non-zero if the final
 * validation loss is above --max-val-loss. Lines are printed with Accelerator.print (the main process only,
 * through the library's stdout, so they keep their order with the library's own output); there is no
 * progress bar. Works unchanged under `accel launch -n 2 java -cp ... TrainGpt`.
 */
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.accel.Accel;
import org.accel.AccelError;
import org.accel.Accelerator;
import org.accel.Batch;
import org.accel.DataLoader;
import org.accel.Model;
import org.accel.Optimizer;
import org.accel.Scheduler;
import org.accel.Tensor;

public final class TrainGpt {
  static final int BLOCK = 128, BATCH = 16, EVAL_BATCH = 32;

  /** Command-line options, with the C example's defaults. */
  static final class Options {
    long steps = 600, evalEvery = 100, saveEvery = 0, stopAt = 0;
    double maxValLoss = 2.35; // measured 2.221 (600 steps)
    String save, resume, config, textDir = "/usr/share/common-licenses";

    static Options parse(String[] args) {
      Options o = new Options();
      for (int i = 0; i < args.length; i += 2) {
        if (i + 1 >= args.length)
          throw new IllegalArgumentException("incomplete argument " + args[i]);
        String v = args[i + 1];
        switch (args[i]) {
          case "--steps": o.steps = Long.parseLong(v); break;
          case "--eval-every": o.evalEvery = Long.parseLong(v); break;
          case "--max-val-loss": o.maxValLoss = Double.parseDouble(v); break;
          case "--save": o.save = v; break;
          case "--save-every": o.saveEvery = Long.parseLong(v); break;
          case "--stop-at": o.stopAt = Long.parseLong(v); break;
          case "--resume": o.resume = v; break;
          case "--text-dir": o.textDir = v; break;
          case "--config": o.config = v; break;
          default: throw new IllegalArgumentException("unknown argument " + args[i] + " (see the comment at the top of TrainGpt.java)");
        }
      }
      if (o.steps < 1 || o.evalEvery < 1 || o.saveEvery < 0 || o.stopAt < 0)
        throw new IllegalArgumentException("--steps and --eval-every must be >= 1, --save-every and --stop-at >= 0");
      return o;
    }
  }

  /** Every regular file of the folder (symbolic links and dot files skipped), in name order, concatenated. */
  static byte[] readTexts(String folder) throws IOException {
    List<Path> files = new ArrayList<>();
    try (Stream<Path> s = Files.list(Paths.get(folder))) {
      s.filter(p -> !p.getFileName().toString().startsWith(".") && Files.isRegularFile(p, LinkOption.NOFOLLOW_LINKS))
          .sorted((a, b) -> a.getFileName().toString().compareTo(b.getFileName().toString()))
          .forEach(files::add);
    }
    java.io.ByteArrayOutputStream text = new java.io.ByteArrayOutputStream();
    for (Path p : files)
      text.write(Files.readAllBytes(p));
    return text.toByteArray();
  }

  /** Mean causal_lm loss over every window of the split (stride BLOCK). */
  static double evaluate(Model model, Tensor tokens) {
    model.eval();
    double sum = 0.0;
    long count = 0;
    try (DataLoader dl = DataLoader.fromTokens(tokens,
             String.format(Locale.ROOT, "{\"block_size\": %d, \"batch_size\": %d}", BLOCK, EVAL_BATCH))) {
      for (Batch batch : dl)
        try (batch; Tensor x = batch.inputs(); Tensor y = batch.labels(); Tensor logits = model.forwardNoGrad(x);
             Tensor loss = Accel.computeLoss("causal_lm", logits, y)) {
          sum += loss.item() * batch.size();
          count += batch.size();
        }
    }
    model.train();
    return sum / Math.max(count, 1);
  }

  /** Prints {@code prompt} continued by the model, token ids mapped back to characters through {@code chars}. */
  static void sample(Accelerator acc, Model model, byte[] chars, int[] indexOf, String prompt, String options,
                     String title) {
    byte[] p = prompt.getBytes(StandardCharsets.ISO_8859_1);
    long[] ids = new long[p.length];
    for (int i = 0; i < p.length; ++i)
      ids[i] = indexOf[p[i] & 0xff];
    try (Tensor in = Tensor.of(ids, ids.length); Tensor out = model.generate(in, options)) {
      long[] generated = out.toLongArray();
      byte[] text = new byte[generated.length];
      for (int i = 0; i < generated.length; ++i)
        text[i] = chars[(int) generated[i]];
      acc.print("--- " + title + " ---\n" + new String(text, StandardCharsets.ISO_8859_1));
    }
  }

  static double cpuSeconds() {
    return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime() / 1e9;
  }

  static int run(Options o) throws IOException {
    byte[] text = readTexts(o.textDir);
    if (text.length < 20 * (BLOCK + 1))
      throw new IOException("not enough text in " + o.textDir);
    // Characters: the distinct bytes of the text, in byte order.
    int[] indexOf = new int[256];
    Arrays.fill(indexOf, -1);
    for (byte b : text)
      indexOf[b & 0xff] = 0;
    byte[] chars = new byte[256];
    int vocab = 0;
    for (int c = 0; c < 256; ++c)
      if (indexOf[c] == 0) {
        chars[vocab] = (byte) c;
        indexOf[c] = vocab++;
      }
    long[] stream = new long[text.length];
    for (int i = 0; i < text.length; ++i)
      stream[i] = indexOf[text[i] & 0xff];
    int nTrain = stream.length - stream.length / 10;

    Accel.setSeed(1337);
    double valLoss = -1.0;
    try (Tensor trainTokens = Tensor.of(Arrays.copyOfRange(stream, 0, nTrain), nTrain);
         Tensor valTokens = Tensor.of(Arrays.copyOfRange(stream, nTrain, stream.length), stream.length - nTrain);
         Accelerator acc = new Accelerator(o.config);
         Model model = Model.fromJson(String.format(Locale.ROOT,
             "{\"type\": \"gpt\", \"vocab_size\": %d, \"n_positions\": %d, \"n_embd\": 128, \"n_layer\": 4, \"n_head\": 4,"
                 + " \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0}", vocab, BLOCK));
         Optimizer opt = new Optimizer(model, "{\"type\": \"adamw\", \"lr\": 0.003, \"weight_decay\": 0.01}");
         Scheduler sched = new Scheduler(opt, String.format(Locale.ROOT,
             "{\"type\": \"cosine\", \"num_warmup_steps\": %d, \"num_training_steps\": %d}", o.steps / 20, o.steps));
         DataLoader train = DataLoader.fromTokens(trainTokens, String.format(Locale.ROOT,
             "{\"block_size\": %d, \"stride\": %d, \"batch_size\": %d, \"shuffle\": true, \"seed\": 7, \"drop_last\": true}",
             BLOCK, BLOCK / 2, BATCH))) {
      acc.prepare(model, opt, train, sched);
      long step = 0;
      if (o.resume != null) {
        Matcher m = Pattern.compile("step_(\\d+)").matcher(Paths.get(o.resume).normalize().getFileName().toString());
        if (!m.matches())
          throw new IllegalArgumentException("--resume expects a folder named step_<N> written by --save, got " + o.resume);
        step = Long.parseLong(m.group(1));
        acc.loadState(o.resume);
      }
      acc.print(String.format(Locale.ROOT, "data: %d characters (vocabulary %d), %d training steps, %s step %d",
          text.length, vocab, o.steps, o.resume != null ? "resumed at" : "from", step));

      long stop = o.stopAt > 0 && o.stopAt < o.steps ? o.stopAt : o.steps;
      // Trackers of the config's "log_with" get every step's loss and learning rate (nothing without log_with).
      acc.initTrackers("train_gpt", String.format(Locale.ROOT, "{\"steps\": %d, \"block_size\": %d, \"batch_size\": %d}",
          o.steps, BLOCK, BATCH));
      double started = cpuSeconds(), lossSum = 0.0;
      long lossCount = 0;
      String stateDir = null;
      while (step < stop) {
        Batch batch = train.nextBatch();
        if (batch == null)
          continue; // end of a pass: the next call starts the next one
        double loss;
        try (batch) {
          loss = acc.trainStep(model, opt, sched, batch, "causal_lm");
        }
        ++step;
        lossSum += loss;
        ++lossCount;
        acc.log("{\"loss\": " + loss + ", \"lr\": " + sched.getLastLr() + "}", step);
        if (step % o.evalEvery == 0 || step == o.steps) {
          valLoss = evaluate(model, valTokens);
          acc.print(String.format(Locale.ROOT, "step %5d  train loss %.4f  val loss %.4f  (%.0f s CPU)", step,
              lossSum / lossCount, valLoss, cpuSeconds() - started));
          lossSum = 0.0;
          lossCount = 0;
        }
        if (o.save != null && ((o.saveEvery > 0 && step % o.saveEvery == 0) || step == o.steps || step == o.stopAt)) {
          stateDir = Paths.get(o.save, "step_" + step).toString();
          acc.saveState(stateDir);
        }
      }
      acc.endTraining();
      if (step < o.steps) {
        acc.print("stopped at step " + step + " of " + o.steps + (stateDir != null ? "; continue with --resume " + stateDir : ""));
        return 0;
      }
      if (valLoss < 0.0) // resumed at the end: nothing trained
        valLoss = evaluate(model, valTokens);
      sample(acc, model, chars, indexOf, "This program is free software", "{\"max_new_tokens\": 90}", "greedy");
      sample(acc, model, chars, indexOf, "Permission ",
          "{\"max_new_tokens\": 110, \"do_sample\": true, \"top_k\": 10, \"temperature\": 0.8, \"seed\": 42}",
          "top-k 10, temperature 0.8, seed 42");
      acc.print(String.format(Locale.ROOT, "final loss %.8f (validation; required <= %.4f)", valLoss, o.maxValLoss));
    }
    return valLoss <= o.maxValLoss ? 0 : 1;
  }

  public static void main(String[] args) {
    int rc;
    try {
      rc = run(Options.parse(args));
    } catch (AccelError e) {
      System.err.println("TrainGpt: " + e.getStatusName() + ": " + e.getMessage());
      rc = 1;
    } catch (IllegalArgumentException | IOException e) {
      System.err.println("TrainGpt: " + e.getMessage());
      rc = 2;
    }
    System.exit(rc);
  }
}
