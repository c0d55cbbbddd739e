import DownloadKit
import Foundation
import HTTPWire

/// Draws progress: live bars on a terminal (stderr), JSON lines (stdout), or nothing; errors always
/// go to stderr as lines beginning `error:`.
public actor ProgressRenderer {
    private struct Row {
        var name: String
        var progress = DownloadProgress()
        var state: DownloadState = .waiting
        var note = ""
    }

    let mode: ProgressMode
    private var rows: [Int: Row] = [:]
    private var linesDrawn = 0
    private var lastDraw = 0.0
    private let count: Int
    private var suppressErrors = false

    /// A display for `count` downloads in `mode`.
    public init(mode: ProgressMode, count: Int) {
        self.mode = mode
        self.count = count
    }

    /// Stops reporting pause/cancel as errors (used while exiting on a signal).
    func beginShutdown() { suppressErrors = true }

    func handle(_ event: DownloadEvent, index: Int, url rawURL: String) {
        // JSON lines are a listing for a front end (the password masked, the query kept); the error line
        // is an error text (query values masked too): docs/NETWORKING-AUTH.md, "What outputs show".
        let url = HTTPURL.redacting(rawURL, .password)
        var row = rows[index] ?? Row(name: Self.displayName(url))
        switch event {
        case .stateChanged(let state, let reason):
            row.state = state
            row.note = Self.describe(reason)
            rows[index] = row
            if mode == .json {
                emitJSON(["event": "state", "index": index, "url": url, "state": state.rawValue]
                    .merging(Self.reasonFields(reason)) { a, _ in a })
            } else if mode == .bar, case .resumed(let offset) = reason, state == .connecting {
                printAbove("\(row.name): resuming from byte \(offset) (\(Self.bytes(offset)))")
            } else if mode == .bar, case .restarted(let why) = reason {
                printAbove("\(row.name): restarting from zero (\(why.rawValue))")
            } else if mode == .bar, case .singleConnection(let why) = reason {
                printAbove("\(row.name): using one connection: \(why)")
            } else if mode == .bar, case .segmented(let connections) = reason {
                printAbove("\(row.name): downloading over \(connections) connections")
            } else if mode == .bar, case .notResumable = reason {
                printAbove("\(row.name): the server does not support resuming; an interruption restarts it")
            }
        case .progress(let progress):
            row.progress = progress
            rows[index] = row
            if mode == .json {
                var fields: [String: Any] = [
                    "event": "progress", "index": index, "url": url, "bytes": progress.bytesReceived,
                    "speed": Int(progress.bytesPerSecond), "connections": progress.activeConnections,
                ]
                if let total = progress.totalBytes { fields["total"] = total }
                if let eta = progress.timeRemaining?.asSeconds { fields["eta"] = (eta * 10).rounded() / 10 }
                emitJSON(fields)
            }
        case .finished(let result):
            row.state = .completed
            row.progress.bytesReceived = result.bytes
            row.progress.totalBytes = result.bytes
            rows[index] = row
            if mode == .json {
                var fields: [String: Any] = [
                    "event": "finished", "index": index, "url": url, "path": result.path, "bytes": result.bytes,
                    "resumedFrom": result.resumedFrom, "transferred": result.bytesTransferred,
                ]
                if let sum = result.checksumHex { fields["checksum"] = sum }
                emitJSON(fields)
            } else if mode == .bar {
                printAbove("saved \(result.path) (\(Self.bytes(result.bytes)))")
            }
        case .failed(let error):
            row.state = .failed
            rows[index] = row
            if mode == .json {
                emitJSON(["event": "error", "index": index, "url": url, "code": error.code.name, "message": error.detail])
            }
            if error.code == .paused || error.code == .cancelled {
                // Not a failure: a signal or the demo stopped it on purpose (the signal handler reports).
                if !suppressErrors { note("\(row.name): \(error.detail)") }
            } else {
                // An invalid URL's detail names the URL already (redacted): not twice.
                let subject = error.code == .invalidURL ? "" : HTTPURL.redacting(rawURL) + ": "
                printError("error: \(subject)\(error.detail)")
            }
        }
        if mode == .bar {
            let now = Date().timeIntervalSince1970
            if now - lastDraw >= 0.1 { draw(); lastDraw = now }
        }
    }

    func note(_ text: String) {
        if mode == .bar { printAbove(text) } else { printError(text) }
    }

    /// Ends the display (the last lines and the total).
    public func finish() {
        if mode == .bar { draw(final: true) }
    }

    // MARK: Drawing

    private func draw(final: Bool = false) {
        var lines: [String] = []
        let active = rows.sorted { $0.key < $1.key }.filter { final ? false : ($0.value.state != .completed && $0.value.state != .failed) }
        for (_, row) in active { lines.append(Self.line(for: row)) }
        if count > 1 && !final {
            let done = rows.values.filter { $0.state == .completed }.count
            let bytes = rows.values.reduce(Int64(0)) { $0 + $1.progress.bytesReceived }
            let speed = rows.values.reduce(0.0) { $0 + ($1.state == .downloading ? $1.progress.bytesPerSecond : 0) }
            lines.append("total: \(done)/\(count) files, \(Self.bytes(bytes)), \(Self.bytes(Int64(speed)))/s")
        }
        var output = ""
        if linesDrawn > 0 { output += "\u{1B}[\(linesDrawn)A" }
        for line in lines { output += "\r\u{1B}[2K" + line + "\n" }
        // Clear lines left over from a taller previous frame.
        if linesDrawn > lines.count {
            for _ in lines.count..<linesDrawn { output += "\r\u{1B}[2K\n" }
            output += "\u{1B}[\(linesDrawn - lines.count)A"
        }
        linesDrawn = lines.count
        FileHandle.standardError.write(Data(output.utf8))
    }

    /// Prints a line above the bars: moves to the top of the bar area, prints the text there, blanks
    /// the rest of the old area and redraws the bars below the text.
    private func printAbove(_ text: String) {
        var output = ""
        if linesDrawn > 0 { output += "\u{1B}[\(linesDrawn)A" }
        output += "\r\u{1B}[2K" + text + "\n"
        for _ in 0..<linesDrawn { output += "\r\u{1B}[2K\n" }
        if linesDrawn > 0 { output += "\u{1B}[\(linesDrawn)A" }
        FileHandle.standardError.write(Data(output.utf8))
        // The cursor is now where the bar area starts: nothing of it is on screen any more.
        linesDrawn = 0
        draw()
    }

    private func printError(_ text: String) {
        if mode == .bar { printAbove(text) } else { FileHandle.standardError.write(Data((text + "\n").utf8)) }
    }

    private func emitJSON(_ fields: [String: Any]) {
        guard let data = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys]) else { return }
        FileHandle.standardOutput.write(data + Data("\n".utf8))
    }

    private static func line(for row: Row) -> String {
        let progress = row.progress
        let name = row.name.count > 24 ? String(row.name.prefix(23)) + "…" : row.name.padding(toLength: 24, withPad: " ", startingAt: 0)
        var bar = ""
        var percent = "    "
        if let fraction = progress.fraction {
            let width = 24
            let filled = Int((min(1, max(0, fraction)) * Double(width)).rounded(.down))
            bar = "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "]"
            percent = String(format: "%3d%%", Int(fraction * 100))
        } else {
            bar = "[" + String(repeating: "?", count: 24) + "]"
        }
        let total = progress.totalBytes.map { "/" + bytes($0) } ?? ""
        let eta = progress.timeRemaining.map { " ETA " + duration($0.asSeconds) } ?? ""
        let state = row.state == .downloading ? "" : " (\(row.state.rawValue))"
        return "\(name) \(bar) \(percent) \(bytes(progress.bytesReceived))\(total) \(bytes(Int64(progress.bytesPerSecond)))/s\(eta)\(state)"
    }

    static func bytes(_ count: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(count) B" : String(format: "%.1f %@", value, units[unit])
    }

    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "?" }
        let s = Int(seconds)
        return s >= 3600 ? String(format: "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60) : String(format: "%d:%02d", s / 60, s % 60)
    }

    static func displayName(_ url: String) -> String {
        let path = url.split(separator: "?").first.map(String.init) ?? url
        let last = path.split(separator: "/").last.map(String.init) ?? url
        return last.isEmpty ? url : last
    }

    static func describe(_ reason: DownloadStateReason) -> String {
        switch reason {
        case .started: return "started"
        case .resumed(let offset): return "resumed at \(offset)"
        case .restarted(let why): return "restarted: \(why.rawValue)"
        case .redirected(let to): return "redirected to \(HTTPURL.redacting(to))"
        case .urlRefreshed(let to): return "URL refreshed: \(HTTPURL.redacting(to))"
        case .retrying(let after, let attempt, let error):
            return "retry \(attempt) in \(String(format: "%.2f", after.asSeconds)) s: \(error)"
        case .notResumable: return "not resumable"
        case .pausedByCaller: return "paused"
        case .cancelledByCaller: return "cancelled"
        case .bodyComplete: return "verifying"
        case .finished: return "finished"
        case .keptExistingFile: return "kept the existing file"
        case .diskFull: return "disk full"
        case .error(let message): return message
        case .segmented(let connections): return "\(connections) connections"
        case .singleConnection(let why): return "one connection: \(why)"
        case .sourceDropped(let source, let reason): return "dropped the source \(HTTPURL.redacting(source)): \(reason)"
        }
    }

    static func reasonFields(_ reason: DownloadStateReason) -> [String: Any] {
        switch reason {
        case .started: return ["reason": "started"]
        case .resumed(let offset): return ["reason": "resumed", "offset": offset]
        case .restarted(let why): return ["reason": "restarted", "why": why.rawValue]
        case .redirected(let to): return ["reason": "redirected", "location": HTTPURL.redacting(to, .password)]
        case .urlRefreshed(let to): return ["reason": "urlRefreshed", "location": HTTPURL.redacting(to, .password)]
        case .retrying(let after, let attempt, let error):
            return ["reason": "retrying", "delay": after.asSeconds, "attempt": attempt, "error": error.detail, "code": error.code.name]
        case .notResumable: return ["reason": "notResumable"]
        case .pausedByCaller: return ["reason": "paused"]
        case .cancelledByCaller: return ["reason": "cancelled"]
        case .bodyComplete: return ["reason": "bodyComplete"]
        case .finished: return ["reason": "finished"]
        case .keptExistingFile: return ["reason": "keptExistingFile"]
        case .diskFull: return ["reason": "diskFull"]
        case .error(let message): return ["reason": "error", "message": message]
        case .segmented(let connections): return ["reason": "segmented", "connections": connections]
        case .singleConnection(let why): return ["reason": "singleConnection", "why": why]
        case .sourceDropped(let source, let reason):
            return ["reason": "sourceDropped", "source": HTTPURL.redacting(source, .password), "why": reason.description]
        }
    }
}

/// The downloads running now, so a signal can checkpoint them all.
actor ActiveDownloads {
    private var downloads: [ObjectIdentifier: Download] = [:]

    func add(_ download: Download) { downloads[ObjectIdentifier(download)] = download }
    func remove(_ download: Download) { downloads[ObjectIdentifier(download)] = nil }

    /// Pauses every running download (each checkpoints its durable bytes) and waits for them.
    func pauseAll() async {
        let all = Array(downloads.values)
        await withTaskGroup(of: Void.self) { group in
            for download in all { group.addTask { _ = await download.pause() } }
        }
    }
}
