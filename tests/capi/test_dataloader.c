#include "capi_test.h"
int main(void){return capi_report("test_dataloader");}
