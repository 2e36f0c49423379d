"""``Objects365``: the Objects365 detection data set (COCO-format annotations, 365 categories)."""
from __future__ import annotations

from .coco import COCO

__all__ = ["Objects365"]


class Objects365(COCO):
    r"""Objects365: images under ``root``, COCO-format annotations in ``ann_file``.

    Samples are laid out by ``order`` from ``"image"``, ``"boxes"``, ``"boxes_category"`` and ``"info"``, as
    in :class:`~megxla.data.dataset.COCO` (Objects365 has no keypoints or polygons). ``class_names`` are
    Objects365's 365 category names in its id order, as MegEngine's (``class_names[i - 1]`` names contiguous id
    ``i`` of the full annotation file), whatever categories ``ann_file`` lists.

    Args:
        root: directory of the image files.
        ann_file: the JSON annotation file.
        remove_images_without_annotations: drop images without a box that is not a crowd's and has a positive
            width and height.
        order: the sample layout.

    Example:
        >>> import json, os, tempfile, cv2
        >>> from megxla.data.dataset import Objects365
        >>> with tempfile.TemporaryDirectory() as root:
        ...     _ = cv2.imwrite(os.path.join(root, "1.jpg"), np.zeros((6, 8, 3), "uint8"))
        ...     ann = {"images": [{"id": 1, "file_name": "1.jpg", "height": 6, "width": 8}],
        ...            "annotations": [{"id": 1, "image_id": 1, "category_id": 18, "bbox": [1, 1, 3, 2],
        ...                             "iscrowd": 0}],
        ...            "categories": [{"id": 18, "name": "dog"}]}
        ...     with open(os.path.join(root, "ann.json"), "w") as f:
        ...         json.dump(ann, f)
        ...     ds = Objects365(root, os.path.join(root, "ann.json"),
        ...             order=("image", "boxes", "boxes_category", "info"))
        ...     image, boxes, category, info = ds[0]
        >>> len(ds), image.shape, boxes, category, info
        (1, (6, 8, 3), array([[1., 1., 4., 3.]], dtype=float32), array([1], dtype=int32), [6, 8, '1.jpg'])
        >>> len(ds.class_names), ds.class_names[:3]
        (365, ('person', 'sneakers', 'chair'))
    """

    supported_order = ("image", "boxes", "boxes_category", "info")

    @property
    def classes_originID(self):
        # (COCO's 80 ids are not Objects365's, and MegEngine's Objects365 has no such table)
        raise AttributeError("'Objects365' object has no attribute 'classes_originID'")

    class_names = (
        "person", "sneakers", "chair", "hat", "lamp", "bottle", "cabinet/shelf", "cup", "car", "glasses",
        "picture/frame", "desk", "handbag", "street lights", "book", "plate", "helmet", "leather shoes", "pillow",
        "glove", "potted plant", "bracelet", "flower", "tv", "storage box", "vase", "bench", "wine glass", "boots",
        "bowl", "dining table", "umbrella", "boat", "flag", "speaker", "trash bin/can", "stool", "backpack", "couch",
        "belt", "carpet", "basket", "towel/napkin", "slippers", "barrel/bucket", "coffee table", "suv", "toy", "tie",
        "bed", "traffic light", "pen/pencil", "microphone", "sandals", "canned", "necklace", "mirror", "faucet",
        "bicycle", "bread", "high heels", "ring", "van", "watch", "sink", "horse", "fish", "apple", "camera", "candle",
        "teddy bear", "cake", "motorcycle", "wild bird", "laptop", "knife", "traffic sign", "cell phone", "paddle",
        "truck", "cow", "power outlet", "clock", "drum", "fork", "bus", "hanger", "nightstand", "pot/pan", "sheep",
        "guitar", "traffic cone", "tea pot", "keyboard", "tripod", "hockey", "fan", "dog", "spoon",
        "blackboard/whiteboard", "balloon", "air conditioner", "cymbal", "mouse", "telephone", "pickup truck", "orange",
        "banana", "airplane", "luggage", "skis", "soccer", "trolley", "oven", "remote", "baseball glove", "paper towel",
        "refrigerator", "train", "tomato", "machinery vehicle", "tent", "shampoo/shower gel", "head phone", "lantern",
        "donut", "cleaning products", "sailboat", "tangerine", "pizza", "kite", "computer box", "elephant",
        "toiletries", "gas stove", "broccoli", "toilet", "stroller", "shovel", "baseball bat", "microwave",
        "skateboard", "surfboard", "surveillance camera", "gun", "life saver", "cat", "lemon", "liquid soap", "zebra",
        "duck", "sports car", "giraffe", "pumpkin", "piano", "stop sign", "radiator", "converter", "tissue ", "carrot",
        "washing machine", "vent", "cookies", "cutting/chopping board", "tennis racket", "candy",
        "skating and skiing shoes", "scissors", "folder", "baseball", "strawberry", "bow tie", "pigeon", "pepper",
        "coffee machine", "bathtub", "snowboard", "suitcase", "grapes", "ladder", "pear", "american football",
        "basketball", "potato", "paint brush", "printer", "billiards", "fire hydrant", "goose", "projector", "sausage",
        "fire extinguisher", "extension cord", "facial mask", "tennis ball", "chopsticks",
        "electronic stove and gas stove", "pie", "frisbee", "kettle", "hamburger", "golf club", "cucumber", "clutch",
        "blender", "tong", "slide", "hot dog", "toothbrush", "facial cleanser", "mango", "deer", "egg", "violin",
        "marker", "ship", "chicken", "onion", "ice cream", "tape", "wheelchair", "plum", "bar soap", "scale",
        "watermelon", "cabbage", "router/modem", "golf ball", "pine apple", "crane", "fire truck", "peach", "cello",
        "notepaper", "tricycle", "toaster", "helicopter", "green beans", "brush", "carriage", "cigar", "earphone",
        "penguin", "hurdle", "swing", "radio", "CD", "parking meter", "swan", "garlic", "french fries", "horn",
        "avocado", "saxophone", "trumpet", "sandwich", "cue", "kiwi fruit", "bear", "fishing rod", "cherry", "tablet",
        "green vegetables", "nuts", "corn", "key", "screwdriver", "globe", "broom", "pliers", "volleyball", "hammer",
        "eggplant", "trophy", "dates", "board eraser", "rice", "tape measure/ruler", "dumbbell", "hamimelon", "stapler",
        "camel", "lettuce", "goldfish", "meat balls", "medal", "toothpaste", "antelope", "shrimp", "rickshaw",
        "trombone", "pomegranate", "coconut", "jellyfish", "mushroom", "calculator", "treadmill", "butterfly",
        "egg tart", "cheese", "pig", "pomelo", "race car", "rice cooker", "tuba", "crosswalk sign", "papaya",
        "hair drier", "green onion", "chips", "dolphin", "sushi", "urinal", "donkey", "electric drill", "spring rolls",
        "tortoise/turtle", "parrot", "flute", "measuring cup", "shark", "steak", "poker card", "binoculars", "llama",
        "radish", "noodles", "yak", "mop", "crab", "microscope", "barbell", "bread/bun", "baozi", "lion", "red cabbage",
        "polar bear", "lighter", "seal", "mangosteen", "comb", "eraser", "pitaya", "scallop", "pencil case", "saw",
        "table tennis paddle", "okra", "starfish", "eagle", "monkey", "durian", "game board", "rabbit", "french horn",
        "ambulance", "asparagus", "hoverboard", "pasta", "target", "hotair balloon", "chainsaw", "lobster", "iron",
        "flashlight",
    )

    def __init__(self, root, ann_file, remove_images_without_annotations=False, *, order=None):
        super().__init__(root, ann_file, remove_images_without_annotations, order=order)
