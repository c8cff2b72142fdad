// Writes, recovers and deletes real ledgers with Apache BookKeeper's own client, for tests and demonstrations.
//
// Run from source with the bookkeeper module's jars (Java 11+ compiles a single-file program at launch):
//
//   java -cp '.jvm/bookkeeper/*' jvm/bookkeeper/LedgerTool.java --metadata-service-uri URI COMMAND [OPTIONS]
//
// Commands (each prints one JSON object per ledger on standard output; logs go to standard error):
//   create  [--ensemble 3] [--write-quorum 2] [--ack-quorum 2] [--entries 10] [--entry-size 64] [--count 1]
//           [--digest CRC32C|CRC32|MAC|DUMMY] [--password TEXT] [--leave-open]
//           [--pause-after K --resume-file PATH]
//           --leave-open writes the entries, then the program halts without closing: the ledger stays OPEN
//           in its metadata, as when a writer is killed.
//           --pause-after K: after K entries of each ledger, print {"ledger_id": ID, "paused_after": K} and wait
//           (up to 300 s) until PATH exists, then go on (e.g. a bookie stopped meanwhile: an ensemble change).
//   recover LEDGER_ID...   open with recovery (fences the ledger on its bookies, then closes it at the last
//                          entry the bookies acknowledged) and print the closed ledger.
//   delete  LEDGER_ID...   delete the ledgers (metadata and, later, the bookies' data).
//   read    LEDGER_ID...   read every entry up to the last confirmed one without recovery; print how many answered.
//
// Exit status: 0 done, 1 a BookKeeper call failed, 2 bad arguments. A ledger whose writes fail inside the client
// (an unchecked exception, not a BKException) is closed where it got to and written again as a new ledger, up to
// three ledgers in all.

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Enumeration;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.StringJoiner;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.net.BookieId;

public final class LedgerTool {
    private static final int BAD_ARGUMENTS = 2;
    private static final int FAILED = 1;
    /** How many ledgers {@code create} writes, at most, for each one asked for when the client fails internally. */
    private static final int CLIENT_ERROR_ATTEMPTS = 3;

    private LedgerTool() {}

    public static void main(String[] argv) {
        Map<String, String> options = new TreeMap<>();
        List<String> positional = new ArrayList<>();
        try {
            parse(argv, options, positional);
        } catch (IllegalArgumentException e) {
            System.err.println("ledger tool: " + e.getMessage());
            System.exit(BAD_ARGUMENTS);
        }
        String uri = options.remove("metadata-service-uri");
        if (uri == null || positional.isEmpty()) {
            System.err.println("ledger tool: usage: --metadata-service-uri URI create|recover|delete|read ...");
            System.exit(BAD_ARGUMENTS);
        }
        String command = positional.remove(0);
        ClientConfiguration conf = new ClientConfiguration().setMetadataServiceUri(uri);
        conf.setAddEntryTimeout(10);
        conf.setReadEntryTimeout(5);
        int status = 0;
        try (BookKeeper client = BookKeeper.forConfig(conf).build()) {
            switch (command) {
                case "create" -> create(client, options);
                case "recover" -> recover(client, options, ids(positional));
                case "delete" -> delete(client, ids(positional));
                case "read" -> read(client, options, ids(positional));
                default -> throw new IllegalArgumentException("unknown command " + command);
            }
        } catch (IllegalArgumentException e) {
            System.err.println("ledger tool: " + e.getMessage());
            status = BAD_ARGUMENTS;
        } catch (Exception e) {
            System.err.println("ledger tool: " + command + " failed: " + e);
            status = FAILED;
        }
        System.exit(status);
    }

    private static void parse(String[] argv, Map<String, String> options, List<String> positional) {
        for (int i = 0; i < argv.length; i++) {
            String arg = argv[i];
            if (!arg.startsWith("--")) {
                positional.add(arg);
            } else if (arg.equals("--leave-open")) {
                options.put("leave-open", "true");
            } else if (i + 1 < argv.length) {
                options.put(arg.substring(2), argv[++i]);
            } else {
                throw new IllegalArgumentException(arg + " needs a value");
            }
        }
    }

    private static List<Long> ids(List<String> positional) {
        if (positional.isEmpty()) {
            throw new IllegalArgumentException("name at least one ledger id");
        }
        List<Long> ids = new ArrayList<>();
        for (String text : positional) {
            ids.add(Long.parseLong(text));
        }
        return ids;
    }

    private static int number(Map<String, String> options, String name, int fallback) {
        String text = options.get(name);
        return text == null ? fallback : Integer.parseInt(text);
    }

    private static DigestType digest(Map<String, String> options) {
        return DigestType.valueOf(options.getOrDefault("digest", "CRC32C").toUpperCase());
    }

    private static byte[] password(Map<String, String> options) {
        return options.getOrDefault("password", "").getBytes(StandardCharsets.UTF_8);
    }

    private static void create(BookKeeper client, Map<String, String> options) throws Exception {
        int ensemble = number(options, "ensemble", 3);
        int writeQuorum = number(options, "write-quorum", 2);
        int ackQuorum = number(options, "ack-quorum", 2);
        int entries = number(options, "entries", 10);
        int size = number(options, "entry-size", 64);
        int count = number(options, "count", 1);
        boolean leaveOpen = options.containsKey("leave-open");
        int pauseAfter = number(options, "pause-after", -1);
        String resumeFile = options.get("resume-file");
        if (pauseAfter >= 0 && resumeFile == null) {
            throw new IllegalArgumentException("--pause-after needs --resume-file");
        }
        for (int n = 0; n < count; n++) {
            for (int attempt = 1; ; attempt++) {
                LedgerHandle ledger = client.createLedger(ensemble, writeQuorum, ackQuorum, digest(options),
                        password(options));
                try {
                    write(ledger, entries, size, pauseAfter, resumeFile);
                    if (!leaveOpen) {
                        ledger.close();
                    }
                } catch (IllegalArgumentException | IllegalStateException e) {
                    throw e;
                } catch (RuntimeException e) {
                    // BookKeeper 4.17's client can fail an add with an internal error instead of a BKException
                    // (a NullPointerException from a completion already recycled, seen on a loaded machine): the
                    // ledger is closed where it got to and a new one is written, a bounded number of times.
                    if (attempt == CLIENT_ERROR_ATTEMPTS) {
                        throw e;
                    }
                    System.err.println("ledger tool: ledger " + ledger.getId() + " failed (" + e
                            + "); closing it and writing another");
                    closeQuietly(ledger);
                    continue;
                }
                print(ledger.getId(), ledger.getLedgerMetadata(), ledger.getLastAddConfirmed());
                break;
            }
        }
        if (leaveOpen) {
            System.out.flush();
            Runtime.getRuntime().halt(0);  // no close, no clean shutdown: the writer is gone
        }
    }

    private static void write(LedgerHandle ledger, int entries, int size, int pauseAfter, String resumeFile)
            throws Exception {
        byte[] payload = new byte[size];
        for (int entry = 0; entry < entries; entry++) {
            if (entry == pauseAfter) {
                pause(ledger.getId(), pauseAfter, Path.of(resumeFile));
            }
            Arrays.fill(payload, (byte) entry);
            ledger.addEntry(payload);
        }
    }

    private static void closeQuietly(LedgerHandle ledger) {
        try {
            ledger.closeAsync().get(30, TimeUnit.SECONDS);
        } catch (Exception e) {
            System.err.println("ledger tool: ledger " + ledger.getId() + " did not close: " + e);
        }
    }

    private static void pause(long id, int written, Path resumeFile) throws InterruptedException {
        System.out.println("{\"ledger_id\": " + id + ", \"paused_after\": " + written + "}");
        System.out.flush();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(300);
        while (!Files.exists(resumeFile)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("no " + resumeFile + " within 300 s");
            }
            Thread.sleep(50);
        }
    }

    private static void recover(BookKeeper client, Map<String, String> options, List<Long> ids) throws Exception {
        for (long id : ids) {
            try (LedgerHandle ledger = client.openLedger(id, digest(options), password(options))) {
                print(id, ledger.getLedgerMetadata(), ledger.getLastAddConfirmed());
            }
        }
    }

    private static void delete(BookKeeper client, List<Long> ids) throws BKException, InterruptedException {
        for (long id : ids) {
            client.deleteLedger(id);
            System.out.println("{\"ledger_id\": " + id + ", \"deleted\": true}");
        }
    }

    private static void read(BookKeeper client, Map<String, String> options, List<Long> ids) throws Exception {
        for (long id : ids) {
            try (LedgerHandle ledger = client.openLedgerNoRecovery(id, digest(options), password(options))) {
                long last = ledger.getLastAddConfirmed();
                long read = 0;
                if (last >= 0) {
                    Enumeration<LedgerEntry> entries = ledger.readEntries(0, last);
                    while (entries.hasMoreElements()) {
                        entries.nextElement();
                        read++;
                    }
                }
                System.out.println("{\"ledger_id\": " + id + ", \"entries_read\": " + read + "}");
            }
        }
    }

    private static void print(long id, LedgerMetadata metadata, long lastAddConfirmed) {
        StringJoiner segments = new StringJoiner(", ", "[", "]");
        NavigableMap<Long, ? extends List<BookieId>> ensembles = new TreeMap<>(metadata.getAllEnsembles());
        for (Map.Entry<Long, ? extends List<BookieId>> segment : ensembles.entrySet()) {
            StringJoiner bookies = new StringJoiner(", ", "[", "]");
            for (BookieId bookie : segment.getValue()) {
                bookies.add("\"" + bookie + "\"");
            }
            segments.add("{\"first_entry\": " + segment.getKey() + ", \"bookies\": " + bookies + "}");
        }
        System.out.println("{\"ledger_id\": " + id
                + ", \"state\": \"" + metadata.getState() + "\""
                + ", \"last_entry\": " + (metadata.isClosed() ? metadata.getLastEntryId() : lastAddConfirmed)
                + ", \"length\": " + metadata.getLength()
                + ", \"ensemble_size\": " + metadata.getEnsembleSize()
                + ", \"write_quorum\": " + metadata.getWriteQuorumSize()
                + ", \"ack_quorum\": " + metadata.getAckQuorumSize()
                + ", \"segments\": " + segments + "}");
        System.out.flush();
    }
}
