import Foundation
import TestOrigin

/// A program the benchmark measures: DownloadKit itself (this executable re-run as `fetch`) or a peer.
enum ClientKind: String, CaseIterable, Codable, Sendable {
    case downloadkit, curl, wget, aria2c, axel

    /// The executable name looked up on PATH (peers only).
    var programName: String { rawValue }

    var isPeer: Bool { self != .downloadkit }
}

/// Where a scenario's body goes.
enum Sink: String, Codable, Sendable {
    /// Discarded: /dev/null for curl and wget, a write to /dev/null per slice for DownloadKit.
    case devnull
    /// A file on the output directory's file system, deleted after each run.
    case file
}

/// A located client.
struct Client: Sendable {
    var kind: ClientKind
    var executable: String
}

/// The command line for one measured run.
struct Invocation {
    var executable: String
    var arguments: [String]
    var environment: [String: String] = [:]
    /// Files the client may leave besides the destination (control files), removed after the run.
    var leftovers: [String] = []
}

extension Client {
    /// Whether this client can take part in a scenario. aria2c and axel cannot write to /dev/null
    /// (they keep control files beside the destination). axel is left out over TLS: its own hostname
    /// check (axel 2.17) rejects the test certificate, whose SAN holds IP addresses besides
    /// `localhost`, and running it with `--insecure` would not be the same work as the others do.
    func supports(_ sink: Sink, tls: Bool) -> Bool {
        switch kind {
        case .downloadkit, .curl, .wget: return true
        case .aria2c: return sink == .file
        case .axel: return sink == .file && !tls
        }
    }

    /// The command that downloads `url` to `destination` (`/dev/null` for the devnull sink), trusting
    /// the CA in `caFile` for https.
    func invocation(url: String, sink: Sink, destination: String, caFile: String, seed: UInt64) -> Invocation {
        let https = url.hasPrefix("https:")
        let target = sink == .devnull ? "/dev/null" : destination
        switch kind {
        case .downloadkit:
            var arguments = ["fetch", "--mode", sink.rawValue, "--seed", String(seed)]
            if https { arguments += ["--cacert", caFile] }
            let leftovers = [destination + ".dkpart", destination + ".dkresume"]
            return Invocation(executable: executable, arguments: arguments + [url, target], leftovers: leftovers)
        case .curl:
            // -f: an HTTP error is an exit status; -w: the body length, checked by the bench.
            var arguments = ["-s", "-f", "-o", target, "-w", "%{size_download}\n"]
            if https { arguments += ["--cacert", caFile] }
            return Invocation(executable: executable, arguments: arguments + [url])
        case .wget:
            var arguments = ["-q", "-O", target]
            if https { arguments += ["--ca-certificate=" + caFile] }
            return Invocation(executable: executable, arguments: arguments + [url])
        case .aria2c:
            let directory = (destination as NSString).deletingLastPathComponent
            let name = (destination as NSString).lastPathComponent
            var arguments = [
                "-q", "-x1", "-s1", "--allow-overwrite=true", "--file-allocation=none", "--auto-file-renaming=false",
                "-d", directory, "-o", name,
            ]
            if https { arguments += ["--ca-certificate=" + caFile] }
            return Invocation(
                executable: executable, arguments: arguments + [url], leftovers: [destination + ".aria2"])
        case .axel:
            return Invocation(
                executable: executable, arguments: ["-q", "-n", "1", "-o", target, url],
                leftovers: [destination + ".st"])
        }
    }
}

/// Finds the peers on PATH. Returns the found ones and the names of the missing ones.
func locatePeers() -> (found: [Client], missing: [String]) {
    var found: [Client] = []
    var missing: [String] = []
    for kind in ClientKind.allCases where kind.isPeer {
        if let path = ProcessRunner.findExecutable(kind.programName) {
            found.append(Client(kind: kind, executable: path))
        } else {
            missing.append(kind.programName)
        }
    }
    return (found, missing)
}

/// The path of this executable, re-run as `fetch` for each measured DownloadKit run.
func currentExecutablePath() -> String {
    var buffer = [CChar](repeating: 0, count: 4096)
    let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    if length > 0 {
        return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
    return CommandLine.arguments[0]
}
