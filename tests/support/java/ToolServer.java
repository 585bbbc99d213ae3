import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import java.util.Base64;

import java.lang.reflect.Proxy;

/**
 * Runs Kafka's command-line tools (their main classes, as bin/*.sh run them) one after another in one JVM, so a
 * test pays the JVM start and class loading once instead of per call.
 *
 * Protocol, one request per line on stdin: base64 fields separated by single spaces: the tool's stdin, its main
 * class, then its arguments. One answer per request on stdout: a line "@@tool-server@@ CODE BASE64(OUTPUT)", where
 * OUTPUT is what the tool wrote to System.out and System.err and CODE its exit code (Exit.exit's argument, 0 when
 * main returned, 1 with the stack trace for an exception). Other lines on stdout (a logger's) are not answers.
 * Kafka's tools end through Kafka's Exit class, whose procedure Kafka's own tool tests replace the same way (a throw
 * instead of System.exit). It is org.apache.kafka.common.utils.Exit up to Kafka 4.3 and
 * org.apache.kafka.common.utils.internals.Exit from 4.4, so it is found and set by reflection.
 */
public final class ToolServer {
    static final String MARK = "@@tool-server@@ ";

    static final class Exited extends RuntimeException {
        final int code;

        Exited(int code) {
            super("Exit.exit(" + code + ")");
            this.code = code;
        }
    }

    public static void main(String[] argv) throws Exception {
        PrintStream answers = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
        BufferedReader requests = new BufferedReader(
                new InputStreamReader(new FileInputStream(FileDescriptor.in), StandardCharsets.UTF_8));
        setExitProcedures();
        Base64.Decoder decoder = Base64.getDecoder();
        answers.println(MARK + "ready");
        String line;
        while ((line = requests.readLine()) != null) {
            String[] fields = line.split(" ", -1);
            byte[] stdin = decoder.decode(fields[0]);
            String main = new String(decoder.decode(fields[1]), StandardCharsets.UTF_8);
            String[] args = new String[fields.length - 2];
            for (int i = 0; i < args.length; i++) {
                args[i] = new String(decoder.decode(fields[i + 2]), StandardCharsets.UTF_8);
            }
            ByteArrayOutputStream captured = new ByteArrayOutputStream();
            PrintStream capture = new PrintStream(captured, true, "UTF-8");
            PrintStream out = System.out;
            PrintStream err = System.err;
            InputStream in = System.in;
            System.setOut(capture);
            System.setErr(capture);
            System.setIn(new ByteArrayInputStream(stdin));
            firstExit = null;
            int code = 0;
            try {
                Class.forName(main).getMethod("main", String[].class).invoke(null, (Object) args);
            } catch (InvocationTargetException e) {
                Exited exited = exited(e.getCause());
                if (exited != null) {
                    code = exited.code;
                } else {
                    e.getCause().printStackTrace(capture);
                    code = 1;
                }
            } catch (Throwable t) {
                t.printStackTrace(capture);
                code = 1;
            } finally {
                if (firstExit != null) {
                    code = firstExit;  // a tool that catches Throwable around its Exit.exit(0) would report 1
                }
                capture.flush();
                System.setOut(out);
                System.setErr(err);
                System.setIn(in);
            }
            answers.println(MARK + code + " " + Base64.getEncoder().encodeToString(captured.toByteArray()));
        }
        Runtime.getRuntime().halt(0);
    }

    private static final PrintStream DISCARD = new PrintStream(java.io.OutputStream.nullOutputStream());
    private static Integer firstExit;

    /** The exit procedure: the first code counts; what the tool prints after it (a catch block printing our
     * exception) is discarded, as it would never have run under System.exit. */
    private static void exit(int code, String message) {
        if (firstExit == null) {
            firstExit = code;
        }
        System.setOut(DISCARD);
        System.setErr(DISCARD);
        throw new Exited(code);
    }

    /** Replaces Exit's exit and halt procedures with {@link #exit} (Exit.Procedure: execute(int, String)). */
    private static void setExitProcedures() throws Exception {
        Class<?> exit;
        try {
            exit = Class.forName("org.apache.kafka.common.utils.internals.Exit");  // Kafka 4.4+
        } catch (ClassNotFoundException e) {
            exit = Class.forName("org.apache.kafka.common.utils.Exit");  // up to Kafka 4.3
        }
        Class<?> procedure = Class.forName(exit.getName() + "$Procedure");
        Object proxy = Proxy.newProxyInstance(procedure.getClassLoader(), new Class<?>[] {procedure},
                (self, method, args) -> {
                    switch (method.getName()) {
                        case "execute":
                            exit((Integer) args[0], (String) args[1]);
                            return null;
                        case "hashCode":
                            return System.identityHashCode(self);
                        case "equals":
                            return self == args[0];
                        case "toString":
                            return "ToolServer.exit";
                        default:
                            return null;
                    }
                });
        exit.getMethod("setExitProcedure", procedure).invoke(null, proxy);
        exit.getMethod("setHaltProcedure", procedure).invoke(null, proxy);
    }

    private static Exited exited(Throwable t) {
        for (; t != null; t = t.getCause()) {
            if (t instanceof Exited) {
                return (Exited) t;
            }
        }
        return null;
    }
}
