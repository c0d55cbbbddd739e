/// An ordered list of HTTP header fields with case-insensitive name lookup.
///
/// Field order and repeated fields are preserved exactly as received or added. Names compare
/// ASCII-case-insensitively (RFC 9110 §5.1). Values are stored without leading or trailing whitespace.
public struct DKHTTPHeaders: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral, CustomStringConvertible {
    /// One header field.
    public struct Field: Sendable, Hashable {
        /// The field name as given (case preserved).
        public var name: String
        /// The field value, with surrounding whitespace removed.
        public var value: String

        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    private var storage: [Field]

    /// Creates an empty header list.
    public init() { storage = [] }

    /// Creates a header list from name/value pairs, in order.
    public init(_ pairs: [(String, String)]) {
        storage = pairs.map { Field(name: $0.0, value: $0.1) }
    }

    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }

    /// The number of fields (repeated fields count once each).
    public var count: Int { storage.count }
    /// Whether there are no fields.
    public var isEmpty: Bool { storage.isEmpty }

    public func makeIterator() -> IndexingIterator<[Field]> { storage.makeIterator() }

    /// Appends a field, keeping any existing fields of the same name.
    public mutating func add(name: String, value: String) {
        storage.append(Field(name: name, value: value))
    }

    /// Replaces every field named `name` with one field carrying `value`, at the position of the first.
    public mutating func replaceOrAdd(name: String, value: String) {
        if let index = storage.firstIndex(where: { Self.namesEqual($0.name, name) }) {
            storage[index].value = value
            storage = storage.enumerated().filter { $0.offset == index || !Self.namesEqual($0.element.name, name) }
                .map(\.element)
        } else {
            add(name: name, value: value)
        }
    }

    /// Removes every field named `name`.
    public mutating func remove(name: String) {
        storage.removeAll { Self.namesEqual($0.name, name) }
    }

    /// Whether a field named `name` is present.
    public func contains(name: String) -> Bool {
        storage.contains { Self.namesEqual($0.name, name) }
    }

    /// The value of the first field named `name`, or `nil`.
    public func first(name: String) -> String? {
        storage.first { Self.namesEqual($0.name, name) }?.value
    }

    /// All values of fields named `name`, in order.
    public subscript(name: String) -> [String] {
        storage.filter { Self.namesEqual($0.name, name) }.map(\.value)
    }

    /// All values of fields named `name`, each split on commas (for list-valued fields such as
    /// `Transfer-Encoding` or `Connection`), trimmed, empty elements dropped.
    public func listValues(name: String) -> [String] {
        self[name].flatMap { value in
            value.split(separator: ",").map { $0.trimmingHTTPWhitespace() }.filter { !$0.isEmpty }
        }
    }

    /// ASCII case-insensitive comparison of two field names.
    public static func namesEqual(_ a: String, _ b: String) -> Bool {
        let a = a.utf8, b = b.utf8
        guard a.count == b.count else { return false }
        return zip(a, b).allSatisfy { asciiLower($0) == asciiLower($1) }
    }

    public var description: String {
        storage.map { "\($0.name): \($0.value)" }.joined(separator: "\n")
    }
}

@inline(__always)
func asciiLower(_ byte: UInt8) -> UInt8 {
    (byte >= 0x41 && byte <= 0x5A) ? byte | 0x20 : byte
}

extension Substring {
    /// Drops spaces and horizontal tabs (HTTP's OWS) from both ends.
    func trimmingHTTPWhitespace() -> String {
        var slice = self[...]
        while let first = slice.first, first == " " || first == "\t" { slice = slice.dropFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice = slice.dropLast() }
        return String(slice)
    }
}

extension String {
    /// Drops spaces and horizontal tabs (HTTP's OWS) from both ends.
    func trimmingHTTPWhitespace() -> String { self[...].trimmingHTTPWhitespace() }
}
