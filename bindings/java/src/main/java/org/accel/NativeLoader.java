package org.accel;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;

/**
 * Loads the JNI library {@code libaccel_java.so} once, trying in order:
 * <ol>
 *   <li>the file named by the system property {@code accel.native.library}, if set;</li>
 *   <li>every directory of {@code java.library.path};</li>
 *   <li>the copy inside the jar under {@code native/<os>-<arch>/}, extracted to a temporary folder.</li>
 * </ol>
 * The JNI library finds {@code libaccel.so.<ABI>} through its RPATH or the system's library path. A jar that
 * carries libaccel too (scripts/package.sh jar) lists it in {@code native/<os>-<arch>/LIBRARIES}, one file a line
 * in load order: those are extracted beside the JNI library and loaded first.
 * When nothing loads, the {@link UnsatisfiedLinkError} lists every path tried and why it failed.
 */
public final class NativeLoader {
  public static final String LIBRARY = "accel_java";
  private static boolean loaded;

  private NativeLoader() {}

  static String platform() {
    String os = System.getProperty("os.name", "unknown").toLowerCase().replaceAll("[^a-z]", "");
    if (os.startsWith("linux"))
      os = "linux";
    else if (os.startsWith("mac") || os.startsWith("darwin"))
      os = "macos";
    else if (os.startsWith("windows"))
      os = "windows";
    String arch = System.getProperty("os.arch", "unknown");
    if (arch.equals("x86_64"))
      arch = "amd64";
    return os + "-" + arch;
  }

  /** Loads the library, or throws UnsatisfiedLinkError listing every path tried. Idempotent. */
  public static synchronized void load() {
    if (loaded)
      return;
    loadLibrary(LIBRARY);
    loaded = true;
  }

  /** Searches for and loads {@code library} (for example "accel_java"); package-private for the tests. */
  static void loadLibrary(String library) {
    String file = System.mapLibraryName(library);
    List<String> tried = new ArrayList<>();

    String explicit = System.getProperty("accel.native.library");
    if (explicit != null && !explicit.isEmpty()) {
      if (tryLoad(new File(explicit), tried))
        return;
    }
    String path = System.getProperty("java.library.path", "");
    for (String dir : path.split(File.pathSeparator)) {
      if (dir.isEmpty())
        continue;
      if (tryLoad(new File(dir, file), tried))
        return;
    }
    String folder = "/native/" + platform() + "/";
    String resource = folder + file;
    try {
      if (NativeLoader.class.getResource(resource) == null) {
        tried.add("jar:" + resource + " (not in the jar)");
      } else {
        // The original file names in one folder: the JNI library's $ORIGIN RUNPATH finds libaccel there too.
        Path dir = Files.createTempDirectory("accel-native");
        dir.toFile().deleteOnExit();
        for (String dependency : bundledLibraries(folder)) {
          File f = extract(folder + dependency, dir.resolve(dependency));
          if (!tryLoad(f, tried)) {
            tried.set(tried.size() - 1, "jar:" + folder + dependency + " -> " + tried.get(tried.size() - 1));
            throw failure(file, tried);
          }
        }
        if (tryLoad(extract(resource, dir.resolve(file)), tried))
          return;
        tried.set(tried.size() - 1, "jar:" + resource + " -> " + tried.get(tried.size() - 1));
      }
    } catch (IOException e) {
      tried.add("jar:" + resource + " (" + e + ")");
    }
    throw failure(file, tried);
  }

  /** The libraries listed in the jar's {@code <folder>LIBRARIES}, or none when the jar has no such list. */
  private static List<String> bundledLibraries(String folder) throws IOException {
    List<String> names = new ArrayList<>();
    try (InputStream in = NativeLoader.class.getResourceAsStream(folder + "LIBRARIES")) {
      if (in == null)
        return names;
      for (String line : new String(in.readAllBytes(), StandardCharsets.UTF_8).split("\n")) {
        String name = line.trim();
        if (!name.isEmpty())
          names.add(name);
      }
    }
    return names;
  }

  private static File extract(String resource, Path target) throws IOException {
    try (InputStream in = NativeLoader.class.getResourceAsStream(resource)) {
      if (in == null)
        throw new IOException(resource + " is listed but not in the jar");
      Files.copy(in, target, StandardCopyOption.REPLACE_EXISTING);
    }
    target.toFile().deleteOnExit();
    return target.toFile();
  }

  private static UnsatisfiedLinkError failure(String file, List<String> tried) {
    StringBuilder msg = new StringBuilder("accel: cannot load the native library " + file + "; tried:");
    for (String t : tried)
      msg.append("\n  ").append(t);
    msg.append("\nSet -Djava.library.path=<dir with ").append(file)
        .append("> or -Daccel.native.library=<file>; libaccel.so must be on its RPATH or the library path.");
    return new UnsatisfiedLinkError(msg.toString());
  }

  private static boolean tryLoad(File f, List<String> tried) {
    if (!f.isFile()) {
      tried.add(f.getAbsolutePath() + " (no such file)");
      return false;
    }
    try {
      System.load(f.getAbsolutePath());
      return true;
    } catch (UnsatisfiedLinkError e) {
      tried.add(f.getAbsolutePath() + " (" + e.getMessage() + ")");
      return false;
    }
  }
}
