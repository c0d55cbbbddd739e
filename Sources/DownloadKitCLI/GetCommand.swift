import ArgumentParser
@_spi(DownloadKitInternal) import DownloadKit
import Foundation
import HTTPClient
import HTTPWire

struct GetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get",
        abstract: "Download one or more URLs, resuming from any partial data already on disk.",
        discussion: """
            Rerunning the same command after an interruption (Ctrl-C, SIGTERM, SIGKILL, network loss)
            continues from the bytes already on disk; a changed resource restarts cleanly. Rerunning with a
            different URL for the same -o FILE continues the partial file when the server's validator
            still matches (expiring signed URLs). Partial data lives beside the destination as
            NAME.dkpart and NAME.dkresume; after success only the destination file exists.

            \(ExitCode.table)
            """
    )

    @Argument(help: "The URLs to download (http or https).")
    var urls: [String] = []

    @Option(name: .customLong("mirror"), help: ArgumentHelp(
        "Another URL of the same file (repeatable; a single URL only): its segments are spread over the URL and its mirrors, each mirror mixed in only once it serves the same file (docs/MIRRORS.md). --connections is the total, at least one per source.",
        valueName: "url"))
    var mirrors: [String] = []

    @Option(name: .customLong("metalink"), help: ArgumentHelp(
        "Download the files a Metalink 4 or 3 document names (instead of URLs): each from its best-priority http(s) URL with the others as mirrors, checked against its strongest whole-file hash (else its size), named by the document under -d DIR; -o FILE only for a document with one file. Metaurls and torrents are skipped; piece hashes are verified piece by piece, a bad piece fetched again from another URL (docs/METALINK.md).",
        valueName: "file"))
    var metalink: String?

    @Option(name: .customShort("o"), help: "Destination file (a single URL only).")
    var output: String?

    @Option(name: .customShort("d"), help: "Destination directory (default: the current directory).")
    var directory: String?

    @Option(name: .customShort("i"), help: "Read URLs from a file, one download per line (# starts a comment); several URLs of the same file on one line, separated by TAB, are its sources (the first the URL, the others mirrors), as aria2's input file.")
    var inputFile: String?

    @Option(name: .customLong("max-concurrent"), help: "At most this many files at a time, whatever their hosts.")
    var maxConcurrent: Int = 3

    @Option(name: .customLong("max-per-host"), help: "At most this many connections to one host (a file's --connections count too). Default: 8, or --max-concurrent times --connections when that is more; when set lower, the other transfers to that host wait for a free connection.")
    var maxPerHost: Int?

    @Option(name: .customLong("connections"), help: "Connections per file (segmented download); falls back to one when the server has no range support, and says so.")
    var connections: Int = 1

    @Option(name: .customLong("cacert"), help: "Also trust the CA certificates in this PEM file.")
    var caCertificate: String?

    @Flag(name: .customLong("insecure"), help: "Do not verify TLS certificates (explicit only; never a fallback).")
    var insecure = false

    @Option(name: .customLong("header"), help: "Extra request header 'Name: value' (repeatable). Authorization, Cookie and Proxy-Authorization never follow a redirect to another origin.")
    var headers: [String] = []

    @Option(name: .customLong("credential-header"), help: "Like --header, for a header that carries a credential (e.g. 'X-Api-Key: v'): never sent to another origin after a redirect.")
    var credentialHeaders: [String] = []

    @Option(name: .customLong("header-file"), help: ArgumentHelp(
        "Credential headers 'Name: value', one a line (# starts a comment), from this file (yours, mode 0600: refused otherwise): like --credential-header, not visible in ps.",
        valueName: "path"))
    var headerFile: String?

    @Option(name: .customLong("checksum"), help: "ALGO=HEX (sha256, sha384, sha512, sha1, md5), checked before the final rename.")
    var checksum: String?

    @Option(name: .customLong("limit-rate"), help: "Bytes per second per file, e.g. 500K, 10M.")
    var limitRate: String?

    @Option(name: .customLong("max-redirects"), help: "Allow this many redirects.")
    var maxRedirects: Int = 10

    @Option(name: .customLong("retries"), help: "Retries after transient failures (reset, closed early, timeouts, 408, 429, 500, 502, 503, 504).")
    var retries: Int = 5

    @Option(name: .customLong("timeout"), help: "Connect timeout and the longest time without receiving a byte, in seconds.")
    var timeout: Double = 30

    @Option(name: .customLong("checkpoint-interval"), help: "Seconds between checkpoints of a running download (resume info and durable bytes; default 2; segmented downloads checkpoint at least every second). Longer: fewer fsyncs; after a power loss up to this many seconds of bytes are fetched again. After a kill or crash the bytes already written are kept whatever the interval.")
    var checkpointInterval: Double = 2

    @Option(name: .customLong("on-complete"), help: "Command to run with the file's path as its last argument when each file completes.")
    var onComplete: String?

    @Option(name: .customLong("progress"), help: "auto, bar, json or none (auto: bar on a terminal, none otherwise).")
    var progress: ProgressMode = .auto

    @Flag(name: .customLong("no-clobber"), help: "An existing complete -o FILE is kept: nothing is requested, exit 0.")
    var noClobber = false

    @Flag(name: .customLong("if-modified"), help: "An existing complete -o FILE is kept when the server answers 304 to If-None-Match / If-Modified-Since (its recorded validator, else its mtime); otherwise it is downloaded again.")
    var ifModified = false

    @OptionGroup var logging: LoggingOptions

    @OptionGroup(title: "Credentials, cookies and client certificates") var auth: AuthOptions

    @OptionGroup var network: NetworkOptions

    mutating func validate() throws {
        if urls.isEmpty && inputFile == nil && metalink == nil {
            throw ValidationError("give at least one URL (or -i FILE, or --metalink FILE)")
        }
        if metalink != nil && (!urls.isEmpty || inputFile != nil || !mirrors.isEmpty || checksum != nil) {
            throw ValidationError(
                "--metalink takes no URL, -i, --mirror or --checksum: the document names the sources and the hash")
        }
        if output != nil && directory != nil { throw ValidationError("-o and -d cannot be used together") }
        if !mirrors.isEmpty && (urls.count != 1 || inputFile != nil) {
            throw ValidationError(
                "--mirror takes a single URL (its mirrors are more sources of that one file; several URLs are several files)")
        }
        if noClobber && ifModified { throw ValidationError("--no-clobber and --if-modified cannot be used together") }
        if maxConcurrent < 1 { throw ValidationError("--max-concurrent must be at least 1") }
        if let maxPerHost, maxPerHost < 1 { throw ValidationError("--max-per-host must be at least 1") }
        if connections < 1 || connections > 64 { throw ValidationError("--connections must be 1 to 64") }
        if maxRedirects < 0 { throw ValidationError("--max-redirects must be 0 or more") }
        if retries < 0 { throw ValidationError("--retries must be 0 or more") }
        if !(timeout > 0) { throw ValidationError("--timeout must be a positive number of seconds") }
        if !(checkpointInterval >= 0.1 && checkpointInterval <= 86_400) {
            throw ValidationError("--checkpoint-interval must be 0.1 to 86400 seconds")
        }
        if let checksum, Checksum(parsing: checksum) == nil {
            throw ValidationError("--checksum must be ALGO=HEX with ALGO sha256, sha384, sha512, sha1 or md5 and a digest of the right length")
        }
        if let limitRate, RateParser.parse(limitRate) == nil {
            throw ValidationError("--limit-rate must be a number of bytes per second, optionally with K, M or G (e.g. 500K)")
        }
        for header in headers + credentialHeaders where HeaderParser.parse(header) == nil {
            // The value is never echoed: it may be a credential.
            throw ValidationError(
                "--header must look like 'Name: value' with a token name and no CR, LF or NUL (got one for \(HeaderParser.printableName(header)))")
        }
    }

    /// The `Name: value` lines of `--header-file` (blank lines and `#` comments skipped).
    /// - Throws: `ValidationError` naming the file: refused (``SecretFileError``), or a line that is not
    ///   a header (by its number, never its value).
    func headerFileLines() throws -> [String] {
        guard let headerFile else { return [] }
        let text: String
        do {
            text = try SecretFile.read(headerFile, option: "--header-file")
        } catch {
            throw ValidationError(error.description)
        }
        var lines: [String] = []
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.hasSuffix("\r") ? String(raw.dropLast()) : String(raw)
            if line.trimmingCharacters(in: .whitespaces).isEmpty || line.hasPrefix("#") { continue }
            guard HeaderParser.parse(line) != nil else {
                throw ValidationError("--header-file \(headerFile) line \(number + 1) is not a 'Name: value' header")
            }
            lines.append(line)
        }
        return lines
    }

    func run() async throws {
        var allURLs = urls
        // The mirrors of each `-i` line's URL (its other TAB-separated URIs).
        var inputMirrors: [String: [String]] = [:]
        var planned: [MetalinkDownload] = []
        if let metalink {
            do {
                planned = try MetalinkRequests.plan(
                    MetalinkRequests.load(metalink), source: metalink, output: output, directory: directory ?? ".",
                    headers: DKHTTPHeaders())
            } catch {
                throw ValidationError(error.description)
            }
            allURLs = planned.map(\.request.url)
        }
        if let inputFile {
            guard let text = try? String(contentsOfFile: inputFile, encoding: .utf8) else {
                throw ValidationError("cannot read -i \(inputFile)")
            }
            do {
                for entry in try InputFile.parse(text, path: inputFile) {
                    allURLs.append(entry.url)
                    if inputMirrors[entry.url] == nil { inputMirrors[entry.url] = entry.mirrors }
                }
            } catch {
                throw ValidationError(error.description)
            }
        }
        if output != nil && allURLs.count > 1 {
            throw ValidationError("-o FILE takes a single URL; use -d DIR for several")
        }
        // A URL listed twice is downloaded once: two writers would share one partial (README, "One
        // destination, one writer").
        var seen = Set<String>()
        allURLs = allURLs.filter { seen.insert($0).inserted }

        let perHost = PerHostConnections.cap(
            maxConcurrent: min(maxConcurrent, allURLs.count), connectionsPerFile: connections, explicit: maxPerHost)
        if PerHostConnections.waitsForConnections(
            maxConcurrent: min(maxConcurrent, allURLs.count), connectionsPerFile: connections, cap: perHost)
        {
            logging.note(
                "at most \(perHost) connections to one host (--max-per-host); transfers beyond that to the same host wait for a free connection")
        }
        var clientConfiguration = DKHTTPClientConfiguration(
            connectTimeout: .seconds(timeout), idleTimeout: .seconds(timeout), maxConnectionsPerOrigin: perHost)
        clientConfiguration.receiveBufferSize = DKHTTPClientConfiguration.receiveBufferSize(
            forConcurrentConnections: min(maxConcurrent, allURLs.count) * connections)
        if insecure { clientConfiguration.tls.certificateVerification = .none }
        if let caCertificate { clientConfiguration.tls.additionalTrustRootFiles.append(caCertificate) }
        try auth.apply(to: &clientConfiguration, urls: allURLs)
        do {
            try network.apply(to: &clientConfiguration)
        } catch {
            FileHandle.standardError.write(Data("error: \(error.detail)\n".utf8))
            throw ExitCode.validationFailure
        }
        let client: DKHTTPClient
        do {
            client = try DKHTTPClient(configuration: clientConfiguration)
        } catch {
            FileHandle.standardError.write(Data("error: TLS setup failed: \(error)\n".utf8))
            throw ExitCode(Exit.tls)
        }

        var configuration = DownloadConfiguration(
            maxRedirects: maxRedirects, retries: retries, lowSpeedTime: .seconds(max(30, timeout)),
            rateLimit: limitRate.flatMap(RateParser.parse), client: clientConfiguration)
        configuration.connections = connections
        configuration.checkpointInterval = .milliseconds(Int64((checkpointInterval * 1000).rounded()))
        configuration.logger = try logging.makeLogger(label: "downloadkit")
        var extraHeaders = DKHTTPHeaders()
        for header in headers {
            if let (name, value) = HeaderParser.parse(header) { extraHeaders.add(name: name, value: value) }
        }
        var credentialNames: [String] = []
        for header in try credentialHeaders + headerFileLines() {
            if let (name, value) = HeaderParser.parse(header) {
                extraHeaders.add(name: name, value: value)
                credentialNames.append(name)
            }
        }
        let checksum = self.checksum.flatMap(Checksum.init(parsing:))
        var requests = allURLs.map { url in
            var request = DownloadRequest(
                url: url,
                destination: output.map { .file($0) } ?? .directory(directory ?? ".", naming: .fromResponse),
                headers: extraHeaders, checksum: checksum)
            request.credentialHeaderNames = credentialNames
            request.mirrors = inputMirrors[url] ?? mirrors
            request.existingFile = noClobber ? .keep : ifModified ? .keepIfNotModified : .replace
            return request
        }
        if metalink != nil {
            requests = try planned.map { plan in
                for line in plan.notes { logging.note(line) }
                var request = plan.request
                request.headers = extraHeaders
                request.credentialHeaderNames = credentialNames
                request.existingFile = noClobber ? .keep : ifModified ? .keepIfNotModified : .replace
                if output == nil { try Self.makeParentDirectory(of: request, under: directory ?? ".") }
                return request
            }
        }
        let expectedSizes = planned.map(\.expectedSize)

        // A rerun after success says what it does with the file already there.
        if let output, !noClobber, !ifModified, FileManager.default.fileExists(atPath: output),
            !FileManager.default.fileExists(atPath: WorkingFiles(besideFile: output).partial)
        {
            logging.note("\(output) exists; downloading it again and replacing it when complete (--no-clobber keeps it, --if-modified asks the server first)")
        }
        let renderer = ProgressRenderer(mode: logging.progressMode(progress), count: requests.count)
        let active = ActiveDownloads()
        let signals = SignalHandling(rerunHint: "rerun the same command") {
            await renderer.beginShutdown()
            await active.pauseAll()
        }
        signals.install()

        let configurationForTasks = configuration
        let onComplete = self.onComplete
        let limit = maxConcurrent
        let failures = await withTaskGroup(of: Int32?.self) { group in
            var pending = requests.enumerated().makeIterator()
            var running = 0
            var failures: [Int32] = []
            while running < limit, let (index, request) = pending.next() {
                group.addTask {
                    await Self.runOne(
                        request, index: index, configuration: configurationForTasks, client: client, active: active,
                        renderer: renderer, onComplete: onComplete,
                        expectedSize: expectedSizes.indices.contains(index) ? expectedSizes[index] : nil)
                }
                running += 1
            }
            while let failure = await group.next() {
                if let failure { failures.append(failure) }
                if signals.isStopping { continue }
                if let (index, request) = pending.next() {
                    group.addTask {
                        await Self.runOne(
                            request, index: index, configuration: configurationForTasks, client: client, active: active,
                            renderer: renderer, onComplete: onComplete,
                            expectedSize: expectedSizes.indices.contains(index) ? expectedSizes[index] : nil)
                    }
                }
            }
            return failures
        }
        await renderer.finish()
        if let jar = clientConfiguration.cookieJar, let path = jar.persistencePath {
            do { try jar.save() } catch { FileHandle.standardError.write(Data("warning: cannot write \(path): \(error)\n".utf8)) }
        }
        if let code = signals.exitCode, let message = signals.message {
            FileHandle.standardError.write(Data((message + "\n").utf8))
            throw ExitCode(code)
        }
        if let first = failures.first {
            throw ExitCode(first)
        }
    }
}

extension GetCommand {
    /// Creates the directories a Metalink file's name needs under `-d DIR` (names like `sub/f.iso`), and
    /// refuses a destination that resolves outside `DIR` (a symlink inside it pointing elsewhere).
    static func makeParentDirectory(of request: DownloadRequest, under directory: String) throws {
        guard case .file(let path) = request.destination else { return }
        let parent = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        } catch {
            throw ValidationError("cannot create the directory \(parent) for --metalink: \(error.localizedDescription)")
        }
        guard FileNaming.isContained(path, in: directory) else {
            throw ValidationError("--metalink: \(path) resolves outside -d \(directory); refused")
        }
    }

    /// Runs one download to its end, feeding the renderer; returns its exit status when it failed.
    /// `expectedSize` (a Metalink's size, when no hash is checked) makes a download of another length a
    /// failure with the checksum status; the file is removed and named.
    static func runOne(
        _ request: DownloadRequest, index: Int, configuration: DownloadConfiguration, client: DKHTTPClient,
        active: ActiveDownloads, renderer: ProgressRenderer, onComplete: String?, expectedSize: Int64? = nil
    ) async -> Int32? {
        let download = Download(request, configuration: configuration, client: client)
        await active.add(download)
        download.start()
        for await event in download.events {
            await renderer.handle(event, index: index, url: request.url)
        }
        await active.remove(download)
        switch await download.resultOrError() {
        case .success(let result):
            if result.keptExistingFile {
                FileHandle.standardError.write(Data("note: \(result.path) kept (\(result.bytes) bytes, not downloaded again)\n".utf8))
                return nil
            }
            for line in sourceSummary(result.sources) { await renderer.note(line) }
            if let expectedSize, result.bytes != expectedSize {
                // A failed download leaves nothing under the destination name (README, "CLI"): these bytes are
                // not the resource the Metalink describes, and the server's own length is what was fetched, so
                // there is nothing to resume either. (An expected length known to the engine would stop it
                // before the rename; the request has no such field yet: docs/METALINK.md.)
                let removed = (try? FileManager.default.removeItem(atPath: result.path)) != nil
                await renderer.note(
                    "error: \(result.path) had \(result.bytes) bytes, the Metalink's size is \(expectedSize): "
                        + (removed ? "removed" : "could not be removed"))
                return Exit.checksum
            }
            if let onComplete { await CompletionCommand.run(onComplete, path: result.path, renderer: renderer) }
            return nil
        case .failure(let error):
            return Exit.status(for: error)
        }
    }
}

extension GetCommand {
    /// One line per source of a download with mirrors (or piece checksums): what it gave, the pieces that
    /// failed from it and were fetched again from it, and why it was dropped (URLs as error texts show
    /// them: no password, no query values).
    static func sourceSummary(_ sources: [SourceUsage]) -> [String] {
        sources.map { source in
            let bad = source.badPieces > 0 ? ", \(source.badPieces) bad piece(s)" : ""
            let again = source.refetchedPieces > 0 ? ", \(source.refetchedPieces) piece(s) re-fetched from it" : ""
            let drop = source.dropReason.map { ", dropped: \($0)" } ?? ""
            return "source \(HTTPURL.redacting(source.url)): \(source.bytes) bytes\(bad)\(again)\(drop)"
        }
    }
}

extension Download {
    /// The end result as a `Result`, for code that handles both outcomes the same way.
    func resultOrError() async -> Result<DownloadResult, DownloadError> {
        do {
            return .success(try await result())
        } catch {
            return .failure(error)
        }
    }
}

/// `--progress`: a bar on a terminal, JSON lines, nothing, or `auto` (a bar on a terminal, else nothing).
public enum ProgressMode: String, ExpressibleByArgument, CaseIterable, Sendable {
    case auto, bar, json, none

    var resolved: ProgressMode {
        guard self == .auto else { return self }
        return isatty(STDERR_FILENO) == 1 ? .bar : .none
    }
}

/// Parses `--limit-rate` values: a number of bytes per second with an optional K, M or G (powers of 1024).
enum RateParser {
    static func parse(_ text: String) -> Int? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard let last = trimmed.last else { return nil }
        let multipliers: [Character: Int] = ["k": 1 << 10, "m": 1 << 20, "g": 1 << 30]
        let multiplier = multipliers[Character(last.lowercased())]
        let digits = multiplier == nil ? trimmed : String(trimmed.dropLast())
        guard let value = Double(digits), value > 0, value.isFinite else { return nil }
        let bytes = value * Double(multiplier ?? 1)
        guard bytes >= 1, bytes < 1e15 else { return nil }
        return Int(bytes)
    }
}

/// Parses `--header 'Name: value'`.
enum HeaderParser {
    /// What precedes the colon, for an error text: printable ASCII only (others as `?`), at most 64
    /// characters, never the value.
    static func printableName(_ text: String) -> String {
        let name = text.firstIndex(of: ":").map { String(text[..<$0]) } ?? "a header without ':'"
        return String(name.unicodeScalars.prefix(64).map { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F ? Character($0) : "?" })
    }

    static func parse(_ text: String) -> (String, String)? {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let name = String(text[..<colon])
        let value = text[text.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        let token = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        guard !name.isEmpty, name.allSatisfy({ token.contains($0) }) else { return nil }
        guard !value.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else { return nil }
        return (name, value)
    }
}

/// Runs `--on-complete` with the file's path as its last argument, through `/bin/sh`.
public enum CompletionCommand {
    /// Runs `--on-complete COMMAND PATH` and reports a failure above the progress display.
    public static func run(_ command: String, path: String, renderer: ProgressRenderer) async {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command + " \"$@\"", "downloadkit-on-complete", path]
        do {
            try process.run()
            // Waited for on a thread of its own (ThreadBridge), never on the cooperative pool.
            _ = try? await ThreadBridge.run { process.waitUntilExit() }
            if process.terminationStatus != 0 {
                await renderer.note("warning: --on-complete exited with status \(process.terminationStatus) for \(path)")
            }
        } catch {
            await renderer.note("warning: --on-complete could not start: \(error)")
        }
    }
}
