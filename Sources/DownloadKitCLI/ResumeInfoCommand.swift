import ArgumentParser
import DownloadKit
import HTTPWire
import Foundation

struct ResumeInfoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume-info",
        abstract: "Show the resume info of a partial download.",
        discussion: """
            PATH may be the destination path of a partial download (its NAME.dkresume is read, else
            the record its NAME.dkpart carries until the first checkpoint), a DownloadKit resume-info
            plist, a .dkpart, or an Apple NSURLSession resumeData plist (XML or binary, info versions 1,
            2 and 4).
            """
    )

    @Argument(help: "Destination path, .dkresume plist, or Apple resumeData plist.")
    var path: String

    @Flag(name: .long, help: "Print JSON for programs.")
    var json = false

    func run() throws {
        let file: String
        let info: ResumeInfo
        let candidates = [path + ".dkresume", path].filter { FileManager.default.fileExists(atPath: $0) && !isDirectory($0) }
        if let plist = candidates.first, !plist.hasSuffix(".dkpart") {
            file = plist
            do {
                info = try ResumeInfo.read(from: plist)
            } catch {
                FileHandle.standardError.write(Data("error: \(plist) is not usable resume info: \(error)\n".utf8))
                throw ExitCode(Exit.fileSystem)
            }
        } else if let (partial, stored) = [path + ".dkpart", path].lazy
            .compactMap({ partial in ResumeInfo.stored(onPartial: partial).map { (partial, $0) } }).first
        {
            // A download killed before its first checkpoint: its record is on the partial itself.
            file = partial + " (its user.downloadkit.resume attribute)"
            info = stored
        } else {
            FileHandle.standardError.write(
                Data("error: no resume info at \(path), \(path).dkresume or on \(path).dkpart\n".utf8))
            throw ExitCode(Exit.fileSystem)
        }
        let tempSize = (try? FileManager.default.attributesOfItem(atPath: info.tempFilePath)[.size] as? Int64) ?? nil
        let format: String
        switch info.origin {
        case .downloadKit: format = "DownloadKit"
        case .apple(let version): format = "Apple NSURLSession resume data, info version \(version)"
        }
        if json {
            var fields: [String: Any] = [
                "file": file, "format": format, "url": redacted(info.currentURL), "originalURL": redacted(info.originalURL),
                "bytesReceived": info.bytesReceived, "tempFile": info.tempFilePath,
                "segments": info.segments.map { segment -> [String: Any] in
                    ["start": segment.start, "end": segment.end ?? -1, "written": segment.written]
                },
            ]
            if let total = info.totalLength { fields["totalLength"] = total }
            if let tag = info.entityTag { fields["etag"] = tag }
            if let modified = info.lastModified { fields["lastModified"] = modified }
            if let size = tempSize { fields["tempFileSize"] = size }
            if let destination = info.destinationPath { fields["destination"] = destination }
            if let ranges = info.acceptsRanges { fields["acceptsRanges"] = ranges }
            if let checksum = info.checksum { fields["checksum"] = "\(checksum.algorithm)=\(checksum.expectedHex)" }
            let data = try JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys, .prettyPrinted])
            FileHandle.standardOutput.write(data + Data("\n".utf8))
            return
        }
        var lines = [
            "resume info:    \(file) (\(format))",
            "URL:            \(redacted(info.currentURL))",
        ]
        if info.originalURL != info.currentURL { lines.append("original URL:   \(redacted(info.originalURL))") }
        let total = info.totalLength.map { " of \($0)" } ?? ""
        let percent = info.totalLength.flatMap { $0 > 0 ? String(format: " (%.1f%%)", Double(info.bytesReceived) * 100 / Double($0)) : nil } ?? ""
        lines.append("bytes received: \(info.bytesReceived)\(total)\(percent)")
        lines.append("validator:      " + (info.entityTag.map { "ETag \($0)" } ?? info.lastModified.map { "Last-Modified \($0)" } ?? "none (resuming cannot detect a changed resource)"))
        if info.entityTag != nil, let modified = info.lastModified { lines.append("last modified:  \(modified)") }
        lines.append("temp file:      \(info.tempFilePath)" + (tempSize.map { " (\($0) bytes on disk)" } ?? " (missing)"))
        if let destination = info.destinationPath { lines.append("destination:    \(destination)") }
        if let ranges = info.acceptsRanges { lines.append("accepts ranges: \(ranges ? "yes" : "no")") }
        if let checksum = info.checksum { lines.append("checksum:       \(checksum.algorithm)=\(checksum.expectedHex)") }
        if info.segments.isEmpty {
            lines.append("segments:       none (single connection)")
        } else {
            lines.append("segments:       \(info.segments.count)")
            for segment in info.segments {
                let end = segment.end.map(String.init) ?? "?"
                lines.append("  [\(segment.start), \(end))  written \(segment.written)")
            }
        }
        print(lines.joined(separator: "\n"))
    }

    private func isDirectory(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }
}

/// A URL as printed by `resume-info`: any `user:password@` is removed (records written by this
/// version hold none, older ones and Apple resume data may).
func redacted(_ url: String) -> String {
    (try? HTTPURL(url))?.withoutUserinfo.absoluteString ?? url
}
