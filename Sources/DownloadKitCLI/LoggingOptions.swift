import ArgumentParser
import DownloadKit
import Foundation
import Logging

/// `-v`, `-q` and `--log-file` for the commands that download (`get`, `queue run`).
///
/// Without them nothing is logged (the progress display and `error:` lines are the interface). `-v`
/// logs what an operator needs to stderr at `info` (`-vv` debug, `-vvv` trace); `--log-file PATH`
/// appends the same lines to a file instead (at `info` unless `-v` asks for more). `-q` turns the
/// progress display and `note:` lines off; `error:` lines stay.
struct LoggingOptions: ParsableArguments {
    @Flag(name: .customShort("v"), help: "Log to stderr: -v info (resume offsets, restarts, retries, redirects), -vv debug, -vvv trace.")
    var verbosity: Int

    @Flag(name: .customShort("q"), help: "Quiet: no progress display and no note: lines (error: lines stay).")
    var quiet = false

    @Option(name: .customLong("log-file"), help: "Append log lines to this file instead of stderr (level info unless -v asks for more).")
    var logFile: String?

    func validate() throws {
        if quiet && verbosity > 0 { throw ValidationError("-q and -v cannot be used together") }
    }

    /// The level asked for, or nil when nothing is to be logged.
    var level: Logger.Level? {
        switch verbosity {
        case 0: return logFile == nil ? nil : .info
        case 1: return .info
        case 2: return .debug
        default: return .trace
        }
    }

    /// A logger for the downloads, or nil when nothing is to be logged.
    /// - Throws: `ValidationError` when the log file cannot be opened.
    func makeLogger(label: String) throws -> Logger? {
        guard let level else { return nil }
        let sink: FileHandle
        if let logFile {
            // Appended to through the project's one open for files others may plant: never
            // through a symbolic link, and only a regular file of ours (created 0600 when missing). Not the
            // strict check: a log file of ours may be group-writable or have another link.
            let fd: Int32
            do {
                fd = try FileSystem.openOwned(logFile, O_WRONLY | O_APPEND | O_CREAT, role: "log file", strict: false)
            } catch {
                throw ValidationError("cannot open --log-file for writing: \(error)")
            }
            sink = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        } else {
            sink = FileHandle.standardError
        }
        var logger = Logger(label: label) { label in LineLogHandler(label: label, sink: sink) }
        logger.logLevel = level
        return logger
    }

    /// The progress display to use: none when quiet, and `auto` gives way to log lines on stderr.
    func progressMode(_ requested: ProgressMode) -> ProgressMode {
        if quiet { return .none }
        if requested == .auto, verbosity > 0, logFile == nil { return .none }
        return requested.resolved
    }

    /// Writes a `note:` line to stderr unless quiet.
    func note(_ text: String) {
        guard !quiet else { return }
        FileHandle.standardError.write(Data("note: \(text)\n".utf8))
    }
}

/// One line per message: time, level, message, then metadata as `key=value`.
struct LineLogHandler: LogHandler {
    let label: String
    let sink: FileHandle
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        let fields = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        let time = ISO8601DateFormatter.string(
            from: Date(), timeZone: TimeZone(identifier: "UTC")!, formatOptions: [.withInternetDateTime, .withFractionalSeconds])
        let line = "\(time) \(event.level) \(event.message)\(fields.isEmpty ? "" : " " + fields)\n"
        sink.write(Data(line.utf8))
    }
}
