import CDownloadKitSystem
import Foundation
import Glibc
import HTTPClient
import HTTPWire

/// What a download does when its destination file already exists (complete, with no partial data
/// beside it) — curl's `--no-clobber` and wget's `-N`, decided before any byte is written.
public enum ExistingFilePolicy: Sendable, Hashable {
    /// Download again and replace it when the new file is complete and verified (the default).
    case replace
    /// Keep it and send no request (`--no-clobber`).
    case keep
    /// Ask the server with `If-None-Match` (the validator recorded when the file was downloaded) and
    /// `If-Modified-Since` (the recorded `Last-Modified`, else the file's mtime); a `304` keeps the file,
    /// anything else downloads it again (`--if-modified`).
    case keepIfNotModified
}

/// The validators of a finished file, kept in its extended attributes (`user.downloadkit.etag`,
/// `user.downloadkit.last-modified`) so that a later conditional download can ask "has it changed?"
/// after the resume info is gone, and the URL it came from (`user.downloadkit.url`, no userinfo) so that
/// a manager that died between the final rename and its task row's update recognises the file as the
/// task's. Written on the partial before its rename. Best effort: file systems without user xattrs fall
/// back to the mtime (and such a manager downloads the file again).
enum FinishedFileValidators {
    static let entityTagAttribute = "user.downloadkit.etag"
    static let lastModifiedAttribute = "user.downloadkit.last-modified"
    static let urlAttribute = "user.downloadkit.url"

    static func record(entityTag: String?, lastModified: String?, url: String, fd: Int32) {
        for (name, value) in [(entityTagAttribute, entityTag), (lastModifiedAttribute, lastModified), (urlAttribute, url)] {
            if let value {
                let bytes = Array(value.utf8)
                _ = bytes.withUnsafeBytes { dk_fsetxattr(fd, name, $0.baseAddress, $0.count) }
            } else {
                _ = dk_fremovexattr(fd, name)
            }
        }
    }

    static func read(at path: String) -> (entityTag: String?, lastModified: String?) {
        let values = read([entityTagAttribute, lastModifiedAttribute], at: path)
        return (values[0], values[1])
    }

    /// The URL recorded on a finished file (without userinfo), or nil.
    static func recordedURL(at path: String) -> String? { read([urlAttribute], at: path)[0] }

    private static func read(_ names: [String], at path: String) -> [String?] {
        let fd = path.withCString { cPath in retryingOnEINTR({ open(cPath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) }) }
        guard fd >= 0 else { return names.map { _ in nil } }
        defer { close(fd) }
        func value(_ name: String) -> String? {
            var buffer = [UInt8](repeating: 0, count: 8192)
            let count = buffer.withUnsafeMutableBytes { dk_fgetxattr(fd, name, $0.baseAddress, $0.count) }
            guard count > 0 else { return nil }
            // A value with control bytes is not ours (or was tampered with): never put it in a header.
            // A tab is legal in a field value (RFC 9110 §5.5).
            guard let text = String(validating: buffer[0..<count], as: UTF8.self),
                text.unicodeScalars.allSatisfy({ ($0.value >= 0x20 && $0.value < 0x7F) || $0 == "\t" })
            else { return nil }
            return text
        }
        return names.map(value)
    }
}

extension Download {
    /// Whether an existing destination makes this run unnecessary; returns the result to report then.
    /// Runs on the transfer thread before the engine.
    static func existingFileOutcome(
        _ request: DownloadRequest, configuration: DownloadConfiguration, client: DKHTTPClient?
    ) throws(DownloadError) -> DownloadResult? {
        guard request.existingFile != .replace, case .file(let path) = request.destination else { return nil }
        var st = stat()
        guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        // Partial data beside it: a download of it is under way or interrupted; let the engine decide.
        let working = try? WorkingFiles(
            destination: request.destination, workingDirectory: request.workingDirectory, url: HTTPURL(request.url))
        guard !FileManager.default.fileExists(atPath: working?.partial ?? path + ".dkpart") else { return nil }
        let kept = DownloadResult(
            path: path, bytes: Int64(st.st_size), resumedFrom: Int64(st.st_size), bytesTransferred: 0,
            finalURL: request.url, checksumHex: nil, isResumable: false, keptExistingFile: true)
        if request.existingFile == .keep { return kept }

        let url: HTTPURL
        do {
            url = try HTTPURL(request.url)
        } catch {
            throw DownloadError(.invalidURL, "invalid URL \(request.url): \(error.detail)")
        }
        let (entityTag, lastModified) = FinishedFileValidators.read(at: path)
        var headers = request.headers
        if let entityTag { headers.replaceOrAdd(name: "If-None-Match", value: entityTag) }
        headers.replaceOrAdd(
            name: "If-Modified-Since",
            value: lastModified ?? HTTPDate(secondsSince1970: Int64(st.st_mtim.tv_sec)).headerValue)
        var status = 0
        do {
            let http = try client ?? DKHTTPClient(configuration: configuration.client, logger: configuration.logger)
            _ = try http.execute(
                DKHTTPRequest(method: .GET, url: url, headers: headers),
                onHead: { head in
                    status = head.status
                    return .discard
                },
                onBody: { _ in })
        } catch {
            // The question could not be asked: the download itself will meet (and report) the problem.
            return nil
        }
        return status == 304 ? kept : nil
    }
}
