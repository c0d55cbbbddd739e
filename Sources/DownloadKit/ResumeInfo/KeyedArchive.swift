import Foundation

/// A property-list value, or a value decoded from an `NSKeyedArchiver` archive, in a `Sendable` form that is safe
/// to walk.
///
/// Raw property lists converted with ``PropertyListTree`` may contain ``uid(_:)`` (keyed-archive references) but
/// never ``object(className:fields:)``; values produced by ``KeyedArchiveReader`` are the opposite: every UID has
/// been resolved and unknown classes appear as ``object(className:fields:)``.
enum ArchiveValue: Sendable, Hashable {
    case null
    case string(String)
    case integer(Int64)
    case real(Double)
    case bool(Bool)
    case data(Data)
    case date(Date)
    case array([ArchiveValue])
    case dictionary([String: ArchiveValue])
    /// An archived object of a class the reader does not model, with its encoded fields resolved.
    case object(className: String, fields: [String: ArchiveValue])
    /// A keyed-archive object reference (`CF$UID`), an index into `$objects`.
    case uid(Int)

    /// The Foundation object `PropertyListSerialization` writes for this value (XML output only).
    var propertyListObject: Any {
        switch self {
        case .null: return ""
        case .string(let value): return value
        case .integer(let value): return Int(value)
        case .real(let value): return value
        case .bool(let value): return value
        case .data(let value): return value
        case .date(let value): return value
        case .array(let values): return values.map(\.propertyListObject)
        case .dictionary(let values): return values.mapValues(\.propertyListObject)
        case .object(_, let fields): return fields.mapValues(\.propertyListObject)
        case .uid(let value): return Int(value)
        }
    }

    var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    var dictionaryValue: [String: ArchiveValue]? {
        if case .dictionary(let value) = self { return value }
        return nil
    }
}

/// Limits applied while converting or decoding untrusted property lists and archives.
struct ArchiveLimits: Sendable {
    /// Maximum nesting of containers (and of UID resolution).
    var maxDepth = 32
    /// Maximum number of values materialised in total; bounds the work a shared-reference DAG can cause.
    var maxNodes = 200_000
    /// Maximum UTF-8 length of one string, in bytes.
    var maxStringBytes = 256 * 1024
    /// Maximum input size, in bytes.
    var maxInputBytes = 4 * 1024 * 1024

    static let `default` = ArchiveLimits()
}

/// Converts Foundation's property-list objects (`Any`) into ``ArchiveValue`` with depth, size and count limits.
///
/// `PropertyListSerialization` is used for parsing (it reads XML and binary on Linux and refuses absurd
/// nesting itself); this type is the one place that looks at Foundation's object representation.
enum PropertyListTree {
    /// Parses `data` as an XML or binary property list and converts it.
    /// - Throws: ``ResumeInfoError/Code/notAPropertyList``, ``ResumeInfoError/Code/tooLarge``.
    static func parse(
        _ data: Data,
        limits: ArchiveLimits = .default
    ) throws(ResumeInfoError) -> (value: ArchiveValue, format: PropertyListSerialization.PropertyListFormat) {
        guard data.count <= limits.maxInputBytes else {
            throw ResumeInfoError(.tooLarge, "property list is \(data.count) bytes; the limit is \(limits.maxInputBytes)")
        }
        guard !data.isEmpty else { throw ResumeInfoError(.notAPropertyList, "input is empty") }
        try BinaryPropertyListScreen.check(data)
        var format = PropertyListSerialization.PropertyListFormat.binary
        let object: Any
        do {
            object = try PropertyListSerialization.propertyList(from: data, options: [], format: &format)
        } catch {
            throw ResumeInfoError(.notAPropertyList, "not an XML or binary property list: \(error)")
        }
        // OpenStep (old-style ASCII) plists are accepted by Foundation but are never resume data; refusing them
        // stops random text from being read as a bare string.
        guard format == .binary || format == .xml else {
            throw ResumeInfoError(.notAPropertyList, "only XML and binary property lists are accepted")
        }
        var budget = limits.maxNodes
        return (try convert(object, depth: 0, budget: &budget, limits: limits), format)
    }

    /// Converts one Foundation property-list object.
    static func convert(
        _ object: Any,
        depth: Int,
        budget: inout Int,
        limits: ArchiveLimits
    ) throws(ResumeInfoError) -> ArchiveValue {
        guard depth <= limits.maxDepth else {
            throw ResumeInfoError(.tooLarge, "property list nests deeper than \(limits.maxDepth) levels")
        }
        budget -= 1
        guard budget >= 0 else {
            throw ResumeInfoError(.tooLarge, "property list holds more than \(limits.maxNodes) values")
        }
        // Bool first: on Darwin an NSNumber holding 0 or 1 would also cast to Int.
        if type(of: object) == Bool.self, let value = object as? Bool { return .bool(value) }
        switch object {
        case let value as String:
            guard value.utf8.count <= limits.maxStringBytes else {
                throw ResumeInfoError(.tooLarge, "a string is \(value.utf8.count) bytes; the limit is \(limits.maxStringBytes)")
            }
            return .string(value)
        case let value as Int: return .integer(Int64(value))
        case let value as Int64: return .integer(value)
        case let value as UInt64:
            guard let narrowed = Int64(exactly: value) else {
                throw ResumeInfoError(.invalidValue, "integer \(value) does not fit in Int64")
            }
            return .integer(narrowed)
        case let value as Double: return .real(value)
        case let value as Data: return .data(value)
        case let value as Date: return .date(value)
        case let value as [Any]:
            var items: [ArchiveValue] = []
            items.reserveCapacity(min(value.count, 1024))
            for item in value { items.append(try convert(item, depth: depth + 1, budget: &budget, limits: limits)) }
            return .array(items)
        case let value as [AnyHashable: Any]:
            if value.count == 1, let raw = value["CF$UID"] {
                // XML spelling of a keyed-archive reference.
                if let index = raw as? Int, index >= 0 { return .uid(index) }
                throw ResumeInfoError(.malformedArchive, "CF$UID is not a non-negative integer")
            }
            var result: [String: ArchiveValue] = [:]
            for (key, item) in value {
                guard let key = key.base as? String else {
                    throw ResumeInfoError(.notAPropertyList, "dictionary key is not a string")
                }
                result[key] = try convert(item, depth: depth + 1, budget: &budget, limits: limits)
            }
            return .dictionary(result)
        case let value as NSNumber:
            let integer = value.int64Value
            if Double(integer) == value.doubleValue { return .integer(integer) }
            return .real(value.doubleValue)
        default:
            if let index = keyedArchiverUID(object) { return .uid(index) }
            throw ResumeInfoError(.notAPropertyList, "unsupported property-list value of type \(type(of: object))")
        }
    }

    /// Reads the index out of Foundation's keyed-archiver UID object.
    ///
    /// Binary plists carry UIDs as their own type, which swift-corelibs-foundation surfaces as an internal
    /// `_NSKeyedArchiverUID` class with a stored `value`, and Darwin as a `CFKeyedArchiverUID` whose description
    /// ends in `{value = N}`. Neither is public API, so this is the one best-effort spot in the reader; the
    /// keyed-archive fixtures pin it.
    private static func keyedArchiverUID(_ object: Any) -> Int? {
        let typeName = String(describing: type(of: object))
        guard typeName.contains("KeyedArchiverUID") || typeName.contains("NSCFType") else { return nil }
        var mirror: Mirror? = Mirror(reflecting: object)
        while let current = mirror {
            for child in current.children where child.label == "value" {
                switch child.value {
                case let value as UInt32: return Int(value)
                case let value as Int: return value >= 0 ? value : nil
                case let value as UInt64: return Int(exactly: value)
                default: break
                }
            }
            mirror = current.superclassMirror
        }
        let text = String(describing: object)
        if let range = text.range(of: "value = ") {
            let digits = text[range.upperBound...].prefix(while: { $0.isASCII && $0.isNumber })
            return Int(digits)
        }
        return nil
    }
}

/// A small, generic reader for `NSKeyedArchiver` archives (`$archiver`, `$objects`, `$top`).
///
/// It resolves UIDs into ``ArchiveValue``s and understands the encodings of the classes resume data uses:
/// `NSDictionary` (`NS.keys`/`NS.objects`), `NSArray`/`NSSet` (`NS.objects`), `NSString` (`NS.string` or
/// `NS.bytes`), `NSData` (`NS.data`), `NSDate` (`NS.time`) and plain numbers/strings stored inline. Any other class
/// becomes ``ArchiveValue/object(className:fields:)`` with its fields resolved. Reference cycles, references out of
/// range, nesting beyond ``ArchiveLimits/maxDepth`` and more than ``ArchiveLimits/maxNodes`` resolved values are
/// errors (``ResumeInfoError/Code/malformedArchive`` or ``ResumeInfoError/Code/tooLarge``), never a crash.
struct KeyedArchiveReader {
    private let objects: [ArchiveValue]
    private let limits: ArchiveLimits
    private var inProgress: Set<Int> = []
    private var budget: Int

    /// Whether a converted property list has the shape of a keyed archive.
    static func isKeyedArchive(_ value: ArchiveValue) -> Bool {
        guard case .dictionary(let top) = value, case .array = top["$objects"] else { return false }
        return top["$archiver"]?.stringValue == "NSKeyedArchiver" || top["$top"] != nil
    }

    /// Parses `data` as a property list and decodes it as a keyed archive, returning the root object.
    static func decode(_ data: Data, limits: ArchiveLimits = .default) throws(ResumeInfoError) -> ArchiveValue {
        let (plist, _) = try PropertyListTree.parse(data, limits: limits)
        return try decodeRoot(of: plist, limits: limits)
    }

    /// Decodes the root object (`$top.root` or `$top.NSKeyedArchiveRootObjectKey`) of a converted archive.
    static func decodeRoot(of archive: ArchiveValue, limits: ArchiveLimits = .default) throws(ResumeInfoError) -> ArchiveValue {
        let (objects, top) = try parts(of: archive)
        let rootReference = top["root"] ?? top["NSKeyedArchiveRootObjectKey"] ?? (top.count == 1 ? top.first?.value : nil)
        guard case .uid(let root)? = rootReference else {
            throw ResumeInfoError(.malformedArchive, "$top has no root object reference")
        }
        var reader = KeyedArchiveReader(objects: objects, limits: limits, budget: limits.maxNodes)
        return try reader.resolve(root, depth: 0)
    }

    /// Finds every string stored under `key` (compared case-insensitively) in any `NSDictionary` of the archive.
    ///
    /// This scans `$objects` directly rather than walking from the root, so it works on archives of classes whose
    /// layout is private (an archived `NSURLRequest` keeps its HTTP header fields in such a dictionary).
    static func stringValues(forDictionaryKey key: String, in archive: ArchiveValue) throws(ResumeInfoError) -> [String] {
        let (objects, _) = try parts(of: archive)
        let wanted = key.lowercased()
        var found: [String] = []
        for object in objects {
            guard case .dictionary(let fields) = object,
                case .array(let keys)? = fields["NS.keys"],
                case .array(let values)? = fields["NS.objects"],
                keys.count == values.count
            else { continue }
            for (keyReference, valueReference) in zip(keys, values) {
                guard case .uid(let keyIndex) = keyReference, case .uid(let valueIndex) = valueReference,
                    keyIndex < objects.count, valueIndex < objects.count,
                    let name = inlineString(objects[keyIndex], objects: objects), name.lowercased() == wanted,
                    let value = inlineString(objects[valueIndex], objects: objects)
                else { continue }
                found.append(value)
            }
        }
        return found
    }

    private static func inlineString(_ value: ArchiveValue, objects: [ArchiveValue]) -> String? {
        switch value {
        case .string(let text): return text == "$null" ? nil : text
        case .dictionary(let fields):
            if case .string(let text)? = fields["NS.string"] { return text }
            if case .data(let bytes)? = fields["NS.bytes"] { return String(validating: bytes, as: UTF8.self) }
            return nil
        default: return nil
        }
    }

    private static func parts(of archive: ArchiveValue) throws(ResumeInfoError) -> ([ArchiveValue], [String: ArchiveValue]) {
        guard case .dictionary(let container) = archive else {
            throw ResumeInfoError(.malformedArchive, "a keyed archive's root must be a dictionary")
        }
        guard case .array(let objects)? = container["$objects"] else {
            throw ResumeInfoError(.malformedArchive, "$objects is missing or not an array")
        }
        guard case .dictionary(let top)? = container["$top"] else {
            throw ResumeInfoError(.malformedArchive, "$top is missing or not a dictionary")
        }
        return (objects, top)
    }

    private init(objects: [ArchiveValue], limits: ArchiveLimits, budget: Int) {
        self.objects = objects
        self.limits = limits
        self.budget = budget
    }

    private mutating func resolve(_ index: Int, depth: Int) throws(ResumeInfoError) -> ArchiveValue {
        guard index >= 0, index < objects.count else {
            throw ResumeInfoError(.malformedArchive, "UID \(index) is outside $objects (count \(objects.count))")
        }
        guard depth <= limits.maxDepth else {
            throw ResumeInfoError(.tooLarge, "archive nests deeper than \(limits.maxDepth) levels")
        }
        budget -= 1
        guard budget >= 0 else {
            throw ResumeInfoError(.tooLarge, "archive expands to more than \(limits.maxNodes) values")
        }
        guard inProgress.insert(index).inserted else {
            throw ResumeInfoError(.malformedArchive, "UID \(index) refers back to itself (reference cycle)")
        }
        defer { inProgress.remove(index) }

        switch objects[index] {
        case .string("$null"): return .null
        case .uid: throw ResumeInfoError(.malformedArchive, "$objects[\(index)] is a bare UID")
        case .array(let items): return .array(try resolveFields(items, depth: depth))
        case .dictionary(let fields): return try resolveObject(fields, index: index, depth: depth)
        case let scalar: return scalar
        }
    }

    private mutating func resolveField(_ value: ArchiveValue, depth: Int) throws(ResumeInfoError) -> ArchiveValue {
        switch value {
        case .uid(let index): return try resolve(index, depth: depth + 1)
        case .array(let items): return .array(try resolveFields(items, depth: depth + 1))
        case .dictionary(let fields):
            var result: [String: ArchiveValue] = [:]
            for (key, item) in fields { result[key] = try resolveField(item, depth: depth + 1) }
            return .dictionary(result)
        default: return value
        }
    }

    private mutating func resolveFields(_ items: [ArchiveValue], depth: Int) throws(ResumeInfoError) -> [ArchiveValue] {
        var result: [ArchiveValue] = []
        result.reserveCapacity(min(items.count, 1024))
        for item in items { result.append(try resolveField(item, depth: depth)) }
        return result
    }

    private mutating func resolveObject(
        _ fields: [String: ArchiveValue],
        index: Int,
        depth: Int
    ) throws(ResumeInfoError) -> ArchiveValue {
        guard case .uid(let classIndex)? = fields["$class"] else {
            // Not an archived object: a plain dictionary stored inline.
            var result: [String: ArchiveValue] = [:]
            for (key, item) in fields { result[key] = try resolveField(item, depth: depth) }
            return .dictionary(result)
        }
        guard classIndex >= 0, classIndex < objects.count, case .dictionary(let classInfo) = objects[classIndex],
            case .string(let className)? = classInfo["$classname"]
        else {
            throw ResumeInfoError(.malformedArchive, "$objects[\(index)] has an invalid $class reference")
        }
        var classes: Set<String> = [className]
        if case .array(let names)? = classInfo["$classes"] {
            for case .string(let name) in names { classes.insert(name) }
        }

        if classes.contains("NSDictionary") {
            guard case .array(let keys)? = fields["NS.keys"], case .array(let values)? = fields["NS.objects"],
                keys.count == values.count
            else {
                throw ResumeInfoError(.malformedArchive, "NSDictionary at $objects[\(index)] lacks matching NS.keys/NS.objects")
            }
            var result: [String: ArchiveValue] = [:]
            for (key, value) in zip(keys, values) {
                // Only string keys are modelled; resume data and header dictionaries use nothing else.
                guard case .string(let name) = try resolveField(key, depth: depth) else { continue }
                result[name] = try resolveField(value, depth: depth)
            }
            return .dictionary(result)
        }
        if classes.contains("NSArray") || classes.contains("NSSet") || classes.contains("NSOrderedSet") {
            guard case .array(let items)? = fields["NS.objects"] else {
                throw ResumeInfoError(.malformedArchive, "\(className) at $objects[\(index)] lacks NS.objects")
            }
            return .array(try resolveFields(items, depth: depth))
        }
        if classes.contains("NSString") {
            if case .string(let text)? = fields["NS.string"] { return .string(text) }
            if case .data(let bytes)? = fields["NS.bytes"], let text = String(validating: bytes, as: UTF8.self) {
                return .string(text)
            }
            throw ResumeInfoError(.malformedArchive, "NSString at $objects[\(index)] has no readable contents")
        }
        if classes.contains("NSData"), case .data(let bytes)? = fields["NS.data"] { return .data(bytes) }
        if classes.contains("NSDate"), let time = fields["NS.time"] {
            switch time {
            case .real(let seconds): return .date(Date(timeIntervalSinceReferenceDate: seconds))
            case .integer(let seconds): return .date(Date(timeIntervalSinceReferenceDate: Double(seconds)))
            default: break
            }
        }
        var resolved: [String: ArchiveValue] = [:]
        for (key, item) in fields where key != "$class" { resolved[key] = try resolveField(item, depth: depth) }
        return .object(className: className, fields: resolved)
    }
}

/// Screens a binary property list (`bplist00`) before Foundation parses it.
///
/// swift-corelibs-foundation crashes (SEGV while bridging an `NSSet` to `AnyHashable`) on some
/// hostile binary plists that contain sets; found by Fuzz/FuzzResumeInfo.swift, input kept in
/// Fuzz/regressions/resumeinfo/. Resume data never holds sets, so any object whose marker is a set
/// or a reserved type is refused here, as are a trailer or offsets that point outside the data.
/// XML plists cannot express sets and are passed through.
enum BinaryPropertyListScreen {
    static func check(_ data: Data) throws(ResumeInfoError) {
        let bytes = [UInt8](data)
        guard bytes.count >= 8, bytes[0..<6].elementsEqual("bplist".utf8) else { return }
        guard bytes.count >= 8 + 32 else { throw refuse("the binary property list is too short for its trailer") }
        let trailer = bytes.count - 32
        let offsetSize = Int(bytes[trailer + 6])
        let referenceSize = Int(bytes[trailer + 7])
        let objectCount = bigEndian(bytes, at: trailer + 8, size: 8)
        let tableOffset = bigEndian(bytes, at: trailer + 24, size: 8)
        guard (1...8).contains(offsetSize), (1...8).contains(referenceSize) else {
            throw refuse("the binary property list's trailer has invalid integer sizes")
        }
        // Compared by subtraction: `tableOffset` is any 64-bit value the file claims, and a sum would overflow.
        guard objectCount > 0, objectCount <= UInt64(bytes.count),
            tableOffset >= 8, tableOffset <= UInt64(trailer),
            objectCount * UInt64(offsetSize) <= UInt64(trailer) - tableOffset
        else { throw refuse("the binary property list's offset table lies outside the data") }
        for index in 0..<Int(objectCount) {
            let offset = bigEndian(bytes, at: Int(tableOffset) + index * offsetSize, size: offsetSize)
            guard offset >= 8, offset < UInt64(trailer) else {
                throw refuse("object \(index) of the binary property list lies outside the data")
            }
            // High nibble: 0 null/bool/fill, 1 int, 2 real, 3 date, 4 data, 5/6 strings, 8 UID,
            // A array, D dictionary. C (set) and the reserved 7, 9, B, E, F never appear in resume data.
            switch bytes[Int(offset)] >> 4 {
            case 0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x8, 0xA, 0xD:
                continue
            default:
                throw refuse("object \(index) of the binary property list has an unsupported type (a set or a reserved marker)")
            }
        }
    }

    private static func bigEndian(_ bytes: [UInt8], at offset: Int, size: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in 0..<size { value = value << 8 | UInt64(bytes[offset + index]) }
        return value
    }

    private static func refuse(_ detail: String) -> ResumeInfoError {
        ResumeInfoError(.notAPropertyList, detail)
    }
}
