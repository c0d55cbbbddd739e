import Foundation

/// One download of a `-i FILE`: a line of TAB-separated URIs (aria2's input-file format), the first the URL,
/// the others its mirrors (more sources of the same file).
struct InputFileEntry: Sendable, Hashable {
    /// The first URI of the line.
    var url: String
    /// The other URIs of the line, in order.
    var mirrors: [String]
}

/// Why a `-i FILE` cannot be read as given: names the file and the line (never a URL, which may carry a
/// credential).
struct InputFileError: Error, CustomStringConvertible {
    var description: String
}

/// aria2's input-file format (`aria2c -i`): one download a line; several URIs of the same file on one line
/// separated by TAB; blank lines and lines starting with `#` skipped. Pure.
///
/// aria2 reads lines that start with white space as options of the download above them (`  out=name`);
/// DownloadKit has none of those per line yet, so such a line is refused, naming it, rather than fetched
/// as a URL or dropped.
enum InputFile {
    /// The downloads `text` lists, in order.
    /// - Parameter path: The file's name, for messages.
    /// - Throws: ``InputFileError`` naming `path` and the line of an option line.
    static func parse(_ text: String, path: String) throws(InputFileError) -> [InputFileEntry] {
        var entries: [InputFileEntry] = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.hasSuffix("\r") ? raw.dropLast() : raw
            if line.allSatisfy({ $0 == " " || $0 == "\t" }) || line.hasPrefix("#") { continue }
            if line.first == " " || line.first == "\t" {
                let name = line.drop { $0 == " " || $0 == "\t" }.prefix { $0 != "=" }
                throw InputFileError(
                    description: "-i \(path) line \(index + 1): option lines (an indented '\(name.prefix(40))=…') are not supported; give one download per line, its URIs separated by TAB")
            }
            let uris = line.split(separator: "\t").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard let url = uris.first else { continue }
            entries.append(InputFileEntry(url: url, mirrors: Array(uris.dropFirst())))
        }
        return entries
    }
}
